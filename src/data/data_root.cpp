// dataset.json and clips.jsonl: parsed strictly (every key typed and range-checked), errors naming file and key or
// file:line. Paths of a clip's files. check_root lives in check_root.cpp.
#include "data/data_root.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace vdt {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  VDT_CHECK(in.good(), path, ": cannot open ", what, "\n---> HINT: is the data root right? it must hold ", what);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

int64_t get_int(const json& j, const std::string& path, const char* key, int64_t min_value) {
  VDT_CHECK(j.contains(key), path, ": missing key '", key, "'");
  const json& v = j[key];
  VDT_CHECK(v.is_number_integer(), path, ": key '", key, "' must be an integer, found ", v.dump());
  const int64_t x = v.get<int64_t>();
  VDT_CHECK(x >= min_value, path, ": key '", key, "' must be >= ", min_value, ", found ", x);
  return x;
}

std::string get_str(const json& j, const std::string& path, const char* key) {
  VDT_CHECK(j.contains(key), path, ": missing key '", key, "'");
  VDT_CHECK(j[key].is_string(), path, ": key '", key, "' must be a string, found ", j[key].dump());
  return j[key].get<std::string>();
}

// One clips.jsonl line -> row; throws "<path>:<line>: <problem>".
ClipRow parse_clip_line(const std::string& text, const std::string& path, int line, int64_t cells) {
  const std::string where = path + ":" + std::to_string(line);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    VDT_FAIL(where, ": malformed JSON (", e.what(),
             ")\n---> HINT: one JSON object per line: {\"clip_id\", \"split\", "
             "\"run\", \"drop\", \"cells\"}");
  }
  VDT_CHECK(j.is_object(), where, ": expected a JSON object, found ", j.dump().substr(0, 80));
  ClipRow r;
  r.line = line;
  for (const char* key : {"clip_id", "split", "run"}) {
    VDT_CHECK(j.contains(key) && j[key].is_string(), where, ": key '", key, "' must be a string",
              j.contains(key) ? ", found " + j[key].dump() : std::string(" (missing)"));
  }
  r.clip_id = j["clip_id"].get<std::string>();
  r.split = j["split"].get<std::string>();
  r.run = j["run"].get<std::string>();
  VDT_CHECK(!r.clip_id.empty() && r.clip_id.find('/') == std::string::npos && r.clip_id != "." && r.clip_id != "..",
            where, ": clip_id '", r.clip_id, "' must be a non-empty file name (no '/')");
  VDT_CHECK(r.split == "train" || r.split == "val", where, ": split must be \"train\" or \"val\", found \"", r.split,
            "\"");
  if (j.contains("drop")) {
    VDT_CHECK(j["drop"].is_boolean(), where, ": key 'drop' must be true or false, found ", j["drop"].dump());
    r.drop = j["drop"].get<bool>();
  }
  VDT_CHECK(j.contains("cells") && j["cells"].is_array(), where, ": key 'cells' must be a list of ", cells, " prompts");
  for (const auto& c : j["cells"]) {
    VDT_CHECK(c.is_string(), where, ": every entry of 'cells' must be a string, found ", c.dump());
    r.cells.push_back(c.get<std::string>());
  }
  VDT_CHECK(static_cast<int64_t>(r.cells.size()) == cells, where, ": 'cells' has ", r.cells.size(),
            " prompts, dataset.json says cells = ", cells);
  return r;
}

}  // namespace

int64_t vocab_size(const std::string& vocab) {
  if (vocab == "parts") return 20;
  if (vocab == "ids") return 10;
  VDT_FAIL("--vocab: unknown vocabulary '", vocab, "', expected parts (K=20) or ids (K=10)");
}

std::pair<int64_t, int64_t> parse_res(const std::string& res, const std::string& what) {
  const auto x = res.find('x');
  int64_t w = 0, h = 0;
  bool ok = x != std::string::npos && x > 0 && x + 1 < res.size();
  if (ok) {
    try {
      size_t nw = 0, nh = 0;
      w = std::stoll(res.substr(0, x), &nw);
      h = std::stoll(res.substr(x + 1), &nh);
      ok = nw == x && nh == res.size() - x - 1 && w > 0 && h > 0;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  VDT_CHECK(ok, what, ": resolution '", res, "' is not WIDTHxHEIGHT (e.g. 832x480)");
  return {w, h};
}

DatasetInfo parse_dataset_json(const std::string& path) {
  const std::string text = read_text(path, "dataset.json");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    VDT_FAIL(path, ": malformed JSON (", e.what(), ")");
  }
  VDT_CHECK(j.is_object(), path, ": expected a JSON object");
  DatasetInfo d;
  d.format = get_str(j, path, "format");
  VDT_CHECK(d.format == kDataFormat, path, ": format is '", d.format, "', expected '", kDataFormat, "'");
  d.res = get_str(j, path, "res");
  parse_res(d.res, path + ": key 'res'");
  d.latent_channels = get_int(j, path, "latent_channels", 1);
  d.latent_frames = get_int(j, path, "latent_frames", 1);
  VDT_CHECK(j.contains("latent_hw") && j["latent_hw"].is_array() && j["latent_hw"].size() == 2 &&
                j["latent_hw"][0].is_number_integer() && j["latent_hw"][1].is_number_integer() &&
                j["latent_hw"][0].get<int64_t>() > 0 && j["latent_hw"][1].get<int64_t>() > 0,
            path, ": key 'latent_hw' must be [H, W] with positive integers, found ",
            j.contains("latent_hw") ? j["latent_hw"].dump() : std::string("nothing"));
  d.latent_h = j["latent_hw"][0].get<int64_t>();
  d.latent_w = j["latent_hw"][1].get<int64_t>();
  d.cells = get_int(j, path, "cells", 1);
  if (j.contains("model_family")) d.model_family = get_str(j, path, "model_family");
  VDT_CHECK(d.model_family == "wan" || d.model_family == "h3", path, ": key 'model_family' is '", d.model_family,
            "', expected \"wan\" or \"h3\"");
  if (d.model_family == "h3") {  // no semantic maps; one prompt per clip; the audio stream's width
    VDT_CHECK(d.cells == 1, path, ": an h3 root has one prompt per clip: key 'cells' must be 1, found ", d.cells);
    d.audio_channels = get_int(j, path, "audio_channels", 1);
    if (j.contains("picture1_short_edge")) d.picture1_short_edge = get_int(j, path, "picture1_short_edge", 32);
    d.sem_scale = j.contains("sem_scale") ? get_int(j, path, "sem_scale", 1) : 1;
    d.vocab = j.contains("vocab") ? get_str(j, path, "vocab") : "ids";
  } else {
    d.sem_scale = get_int(j, path, "sem_scale", 1);
    d.vocab = get_str(j, path, "vocab");
  }
  VDT_CHECK(d.vocab == "parts" || d.vocab == "ids", path, ": key 'vocab' is '", d.vocab,
            "', expected \"parts\" or \"ids\"");
  if (j.contains("collapse_parts") || d.vocab == "parts") {
    VDT_CHECK(j.contains("collapse_parts") && j["collapse_parts"].is_array() && j["collapse_parts"].size() == 20, path,
              ": key 'collapse_parts' must be a list of 20 integers (part -> id, each in 0..9)");
    for (const auto& v : j["collapse_parts"]) {
      VDT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < 10, path,
                ": key 'collapse_parts' has entry ", v.dump(), ", expected integers in 0..9");
      d.collapse_parts.push_back(v.get<int64_t>());
    }
  }
  d.text_dim = get_int(j, path, "text_dim", 1);
  d.text_len = get_int(j, path, "text_len", 1);
  d.null_prompt = get_str(j, path, "null_prompt");
  return d;
}

std::string sft_cells_problem(const DatasetInfo& info, const std::string& dataset_json) {
  if (info.model_family != "wan" || info.cells == info.latent_frames) return "";
  return dataset_json + ": cells = " + std::to_string(info.cells) +
         " prompts per clip but latent_frames = " + std::to_string(info.latent_frames) +
         "; `vdt train sft` gives every latent frame its own prompt (per-cell " +
         "text: frame f sees cell f), so each clip needs " + std::to_string(info.latent_frames) + " prompts" +
         "\n---> HINT: list one prompt per latent frame in index/clips.jsonl's \"cells\" (repeat a clip's prompt for " +
         "a single-prompt clip) and set \"cells\": " + std::to_string(info.latent_frames) + " in dataset.json";
}

std::vector<ClipRow> parse_clips_jsonl(const std::string& path, int64_t cells, std::vector<std::string>* problems) {
  std::istringstream in(read_text(path, "index/clips.jsonl"));
  std::vector<ClipRow> rows;
  std::map<std::pair<std::string, std::string>, int> seen;  // (split, clip_id) -> line
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines (e.g. a trailing newline)
    try {
      ClipRow r = parse_clip_line(text, path, line, cells);
      auto [it, fresh] = seen.emplace(std::make_pair(r.split, r.clip_id), line);
      VDT_CHECK(fresh, path, ":", line, ": clip '", r.clip_id, "' is listed twice in split ", r.split,
                " (first at line ", it->second, ")");
      rows.push_back(std::move(r));
    } catch (const Error& e) {
      if (!problems) throw;
      problems->push_back(e.what());
    }
  }
  if (rows.empty()) {
    const std::string msg = path + ": no clips listed";
    if (!problems) VDT_FAIL(msg);
    problems->push_back(msg);
  }
  return rows;
}

DataRoot DataRoot::open(const std::string& root) {
  VDT_CHECK(!root.empty(), "--data_root: no data root given");
  VDT_CHECK(std::filesystem::is_directory(root), root, ": data root is not a directory");
  DataRoot r;
  r.root_ = root;
  while (r.root_.size() > 1 && r.root_.back() == '/') r.root_.pop_back();
  r.info_ = parse_dataset_json(r.dataset_json_path());
  r.rows_ = parse_clips_jsonl(r.clips_path(), r.info_.cells, nullptr);
  return r;
}

std::string DataRoot::latent_path(const std::string& clip) const { return root_ + "/latents/" + clip + ".safetensors"; }

std::string DataRoot::cond_path(const std::string& clip) const {
  const std::string st = root_ + "/cond/" + clip + ".safetensors";
  if (std::filesystem::exists(st)) return st;
  const std::string npz = root_ + "/cond/" + clip + ".npz";
  if (std::filesystem::exists(npz)) return npz;
  return st;
}

std::string DataRoot::meta_path(const std::string& clip) const { return root_ + "/meta/" + clip + ".json"; }

}  // namespace vdt
