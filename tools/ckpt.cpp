#include "tools/ckpt.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "model/config.h"
#include "model/denoiser_registry.h"
#include "model/h3/h3_config.h"
#include "model/h3/h3_weights.h"
#include "model/lora.h"
#include "model/wan_dit.h"
#include "model/weights_io.h"

namespace vdt {

const std::vector<ConfigField<CkptFilesArgs>>& CkptFilesArgs::fields() {
  static const std::vector<ConfigField<CkptFilesArgs>> f = {
      {"files", "safetensors file(s): one file or the shards of one checkpoint", &CkptFilesArgs::files, true}};
  return f;
}

const std::vector<ConfigField<CkptCheckArgs>>& CkptCheckArgs::fields() {
  using C = CkptCheckArgs;
  static const std::vector<ConfigField<C>> f = {
      {"files", "safetensors file(s): one file or the shards of one checkpoint", &C::files, true},
      model_field(&C::model, denoiser_presets(), "the keys are checked against it; empty = the detected preset"),
  };
  return f;
}

const std::vector<ConfigField<CkptDiffArgs>>& CkptDiffArgs::fields() {
  using C = CkptDiffArgs;
  static const std::vector<ConfigField<C>> f = {{"a", "first checkpoint", &C::a, true},
                                                {"b", "second checkpoint", &C::b, true}};
  return f;
}

const std::vector<ConfigField<MergeLoraArgs>>& MergeLoraArgs::fields() {
  using C = MergeLoraArgs;
  static const std::vector<ConfigField<C>> f = {
      {"--base", "base weights (the shards of one checkpoint)", &C::base, true},
      {"--lora", "LoRA file (vdt or PEFT names)", &C::lora, true},
      {"--out", "merged safetensors to write", &C::out, true},
      {"--alpha", "LoRA alpha when the file has none (0: its rank)", &C::alpha},
  };
  return f;
}

const std::vector<ConfigField<QuantizeBaseArgs>>& QuantizeBaseArgs::fields() {
  using C = QuantizeBaseArgs;
  static const std::vector<ConfigField<C>> f = {
      {"--weights", "base weights (a file or a directory of shards)", &C::weights, true},
      {"--out", "the FP8 base to write (safetensors)", &C::out, true},
      device_field(&C::device),
  };
  return f;
}

CkptSummary inspect_ckpt(const SafetensorsSet& files) {
  CkptSummary s;
  s.metadata = files.metadata();
  for (const auto& k : files.keys()) {
    const auto& e = files.entry(k);
    int64_t n = 1;
    for (auto d : e.shape) n *= d;
    ++s.tensors, s.parameters += n, s.bytes += static_cast<int64_t>(e.end - e.begin);
    ++s.dtypes[e.dtype];
    char w = 0;
    if (!lora_module_of(k, &w).empty() && w == 'A') ++s.lora_modules;
    if (k.rfind("gc_sem_cond.", 0) == 0) ++s.sem_cond_keys;
  }
  try {
    s.preset = detect_config(files).preset, s.family = "wan";
  } catch (const Error&) {
    try {
      s.preset = detect_h3_config(files).preset, s.family = "minimax-h3";
    } catch (const Error&) {
      s.preset = "", s.family = "";
    }
  }
  return s;
}

std::vector<std::string> check_ckpt(const SafetensorsSet& files, const std::string& preset) {
  std::vector<std::string> problems;
  const auto summary = inspect_ckpt(files);
  const bool is_lora = summary.lora_modules > 0;
  const auto h3_presets = h3_preset_names();
  const bool h3 = preset.empty() ? summary.family == "minimax-h3"
                                 : std::find(h3_presets.begin(), h3_presets.end(), preset) != h3_presets.end();
  if (!is_lora && h3) {  // shapes are known without building the model: the list of h3_checkpoint_shapes
    const auto want = h3_checkpoint_shapes(preset.empty() ? detect_h3_config(files) : h3_preset(preset));
    const std::string name = preset.empty() ? summary.preset : preset;
    for (const auto& [k, shape] : want) {
      const std::string stored = files.contains(k) ? k : "model." + k;
      if (!files.contains(stored))
        problems.push_back(k + ": missing (preset " + name + ")");
      else if (files.entry(stored).shape != shape)
        problems.push_back(k + ": shape mismatch for preset " + name);
    }
    for (const auto& k : files.keys()) {
      const std::string n = k.rfind("model.", 0) == 0 ? k.substr(6) : k;
      if (!want.count(n) && k.rfind("fixture.", 0) != 0) problems.push_back(k + ": unexpected for preset " + name);
    }
  } else if (!is_lora) {
    std::string name = preset.empty() ? summary.preset : preset;
    if (name.empty()) {
      problems.push_back("the keys are not a Wan DiT or a MiniMax-H3 DiT of any preset (" +
                         std::to_string(summary.tensors) + " tensors); name one with --model to see which keys differ");
    } else {
      // The key set depends on the layer count and the architecture, not the widths: the key structure at the tiny
      // preset's widths. The shapes depend on the widths, not the depth, and every block has the same ones: one block
      // at the real widths (a fraction of the model's memory) gives them.
      const ModelConfig mc = preset.empty() ? detect_config(files) : preset_config(preset);
      std::map<std::string, std::vector<int64_t>> want, one_block;
      {
        ModelConfig keys = mc;
        const ModelConfig t = preset_config("tiny");
        keys.dim = t.dim, keys.ffn_dim = t.ffn_dim, keys.num_heads = t.num_heads, keys.in_dim = t.in_dim;
        keys.out_dim = t.out_dim, keys.text_dim = t.text_dim, keys.freq_dim = t.freq_dim;
        WanDiT model(keys);
        for (const auto& kv : model->named_parameters()) want[kv.key()] = {};
        ModelConfig one = mc;
        one.num_layers = 1;
        WanDiT shapes(one);
        for (const auto& kv : shapes->named_parameters()) one_block[kv.key()] = kv.value().sizes().vec();
      }
      for (auto& [k, shape] : want) {  // blocks.<i>.rest -> blocks.0.rest
        std::string in_one = k;
        if (k.rfind("blocks.", 0) == 0) in_one = "blocks.0" + k.substr(k.find('.', 7));
        const auto it = one_block.find(in_one);
        if (it != one_block.end()) shape = it->second;
      }
      std::set<std::string> have;
      for (const auto& k : files.keys())
        if (k.rfind("gc_sem_cond.", 0) != 0) have.insert(k);
      for (const auto& [k, shape] : want) {
        if (!have.count(k)) {
          problems.push_back(k + ": missing (preset " + name + ")");
          continue;
        }
        const auto& got = files.entry(k).shape;
        if (shape.empty() || got == shape) continue;
        const bool transposed = got.size() == 2 && shape.size() == 2 && got[0] == shape[1] && got[1] == shape[0];
        problems.push_back(k + ": shape " + c10::str(at::IntArrayRef(got)) + ", preset " + name + " expects " +
                           c10::str(at::IntArrayRef(shape)) + (transposed ? " (transposed)" : ""));
      }
      for (const auto& k : have)
        if (!want.count(k)) problems.push_back(k + ": unexpected for preset " + name);
      if (summary.sem_cond_keys != 0 && summary.sem_cond_keys != 6)
        problems.push_back("gc_sem_cond: " + std::to_string(summary.sem_cond_keys) + " keys, expected 6");
    }
  } else {
    try {
      read_lora(files.file_of(files.keys().front()));
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  for (const auto& k : files.keys()) {
    const auto t = files.get(k);
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>())
      problems.push_back(k + ": " + std::to_string((~torch::isfinite(t)).sum().item<int64_t>()) +
                         " non-finite values (NaN or Inf)");
  }
  return problems;
}

std::vector<CkptDiffRow> diff_ckpt(const SafetensorsSet& a, const SafetensorsSet& b) {
  std::set<std::string> keys;
  for (const auto& k : a.keys()) keys.insert(k);
  for (const auto& k : b.keys()) keys.insert(k);
  std::vector<CkptDiffRow> rows;
  for (const auto& k : keys) {
    CkptDiffRow r{k, "", 0, 0};
    if (!a.contains(k))
      r.what = "only in B";
    else if (!b.contains(k))
      r.what = "only in A";
    else if (a.entry(k).shape != b.entry(k).shape)
      r.what = "shape";
    else {
      const auto ta = a.get(k).to(torch::kFloat64), tb = b.get(k).to(torch::kFloat64);
      r.max_abs = ta.numel() ? (ta - tb).abs().max().item<double>() : 0;
      const double n = ta.norm().item<double>();
      r.rel_l2 = (ta - tb).norm().item<double>() / (n > 0 ? n : 1.0);
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace vdt
