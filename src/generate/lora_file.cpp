// LoraFileMeta: every key written and parsed here; numbers as the Python trainer writes them (floats as Python's
// str(), the schedule as comma-separated timesteps).
#include "generate/lora_file.h"

#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/py_float.h"

namespace vdt {
namespace {

std::string join(const std::vector<double>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    out += py_float(v[i]);
  }
  return out;
}

std::vector<double> split_numbers(const std::string& s, const std::string& file, const std::string& key) {
  std::vector<double> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VDT_CHECK(used > 0 && used == item.size() && std::isfinite(v), file, ": metadata '", key, "' is \"", s,
              "\", expected comma-separated numbers (timesteps 0..1000)");
    out.push_back(v);
  }
  return out;
}

}  // namespace

Metadata LoraFileMeta::to_metadata() const {
  Metadata m = {{"format", "pt"},
                {"base", base},
                {"model", model},
                {"text_handling", text_handling},
                {"weights", weights},
                {"step", std::to_string(step)},
                {"objective", objective},
                {"span_chunks", std::to_string(span_chunks)},
                {"level_shift", py_float(level_shift)},
                {"chunk_frames", std::to_string(chunk_frames)},
                {"rank", std::to_string(rank)},
                {"alpha", py_float(alpha)},
                {"seed", std::to_string(seed)},
                {"val_clips", std::to_string(val_clips)},
                {"clean_first_frame", clean_first_frame ? "1" : "0"},
                {"picture1", picture1},
                {"alpha_tensors", "<module>.alpha per module (kohya): every loader applies alpha / rank"}};
  if (!targets.empty()) {
    std::string list;
    for (size_t i = 0; i < targets.size(); ++i) {
      if (i > 0) list += ',';
      list += targets[i];
    }
    m["targets"] = list;
  }
  if (student_steps > 0) {
    m["student"] = "few-step";
    m["student_steps"] = std::to_string(student_steps);
    m["student_schedule"] = join(student_timesteps);
    m["student_cfg"] = py_float(student_cfg);
    if (!student_sampler.empty()) m["student_sampler"] = student_sampler;
  }
  if (ema > 0) m["ema"] = py_float(ema);
  return m;
}

LoraFileMeta LoraFileMeta::from_metadata(const Metadata& m, const std::string& file) {
  LoraFileMeta o;
  auto str = [&](const char* key, std::string& v) {
    if (auto it = m.find(key); it != m.end()) v = it->second;
  };
  str("base", o.base), str("model", o.model), str("text_handling", o.text_handling), str("weights", o.weights);
  str("objective", o.objective), str("picture1", o.picture1);
  if (o.model.empty()) o.model = o.base.empty() ? "wan2.2-ti2v-5b" : o.base;  // files that name the base only
  o.step = metadata_int(m, "step", file, o.step);
  o.span_chunks = metadata_int(m, "span_chunks", file, o.span_chunks);
  o.level_shift = metadata_double(m, "level_shift", file, o.level_shift);
  o.chunk_frames = metadata_int(m, "chunk_frames", file, o.chunk_frames);
  o.rank = metadata_int(m, "rank", file, o.rank);
  o.alpha = metadata_double(m, "alpha", file, o.alpha);
  if (auto it = m.find("seed"); it != m.end()) {  // the run's uint64 seed (past int64's range too)
    size_t used = 0;
    try {
      o.seed = std::stoull(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VDT_CHECK(used > 0 && used == it->second.size() && it->second[0] != '-', file, ": metadata 'seed' is \"",
              it->second, "\", expected a whole number >= 0");
  }
  o.val_clips = metadata_int(m, "val_clips", file, o.val_clips);
  if (auto it = m.find("clean_first_frame"); it != m.end()) {
    VDT_CHECK(it->second == "0" || it->second == "1", file, ": metadata 'clean_first_frame' is \"", it->second,
              "\", expected 0 or 1");
    o.clean_first_frame = it->second == "1";
  }
  VDT_CHECK(o.span_chunks >= 1 && o.chunk_frames >= 1, file, ": metadata span_chunks ", o.span_chunks,
            " and chunk_frames ", o.chunk_frames, ": expected >= 1 each");
  if (auto it = m.find("targets"); it != m.end()) {
    std::stringstream in(it->second);
    for (std::string t; std::getline(in, t, ',');) {
      VDT_CHECK(!t.empty(), file, ": metadata 'targets' is \"", it->second,
                "\", expected comma-separated module names");
      o.targets.push_back(t);
    }
  }
  o.student_steps = metadata_int(m, "student_steps", file, 0);
  if (auto it = m.find("student_schedule"); it != m.end())
    o.student_timesteps = split_numbers(it->second, file, "student_schedule");
  o.student_cfg = metadata_double(m, "student_cfg", file, 1.0);
  if (auto it = m.find("student_sampler"); it != m.end()) {
    VDT_CHECK(it->second == "renoise", file, ": metadata 'student_sampler' is \"", it->second,
              "\", expected renoise (or no key: Euler steps)");
    o.student_sampler = it->second;
  }
  o.ema = metadata_double(m, "ema", file, 0.0);
  VDT_CHECK(o.student_steps == static_cast<int64_t>(o.student_timesteps.size()), file, ": metadata student_steps ",
            o.student_steps, " but student_schedule has ", o.student_timesteps.size(),
            " timesteps; a few-step student's file names one timestep per step");
  return o;
}

LoraFileMeta read_lora_meta(const std::string& path) {
  return LoraFileMeta::from_metadata(SafetensorsFile::open(path)->metadata(), path);
}

void save_lora_file(const std::string& path, const LoraFileMeta& meta, const NamedTensors& factors) {
  NamedTensors bf16;
  const std::string suffix = ".lora_A.weight";
  for (const auto& [n, p] : factors) {
    bf16.emplace_back(n, p.detach().to(torch::kBFloat16).to(torch::kCPU));
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      bf16.emplace_back(n.substr(0, n.size() - suffix.size()) + ".alpha",
                        torch::tensor(static_cast<float>(meta.alpha), torch::kFloat32));
  }
  save_safetensors(path, bf16, meta.to_metadata());
}

}  // namespace vdt
