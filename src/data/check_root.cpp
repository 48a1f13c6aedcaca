// check_root: `vdt data check`. Unlike DataRoot / SftDataset, which stop at the first problem, this keeps going and
// collects every problem of every file (each message already starts with its file), so one run lists them all.
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "data/clip_io.h"
#include "core/safetensors.h"
#include "data/data_root.h"
#include "data/h3_root.h"
#include "data/text_table.h"

namespace vdt {

std::vector<std::string> check_root(const std::string& root_in, const std::string& text_table,
                                    const std::string& expected_res) {
  std::vector<std::string> problems;
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (!std::filesystem::is_directory(root)) return {root + ": data root is not a directory"};
  // Runs `fn`, turning a vdt::Error (or a torch error) into one problem line.
  auto attempt = [&](auto&& fn) {
    try {
      fn();
      return true;
    } catch (const Error& e) {
      problems.push_back(e.what());
    } catch (const c10::Error& e) {
      problems.push_back(e.what_without_backtrace());
    }
    return false;
  };

  const std::string dataset_json = root + "/dataset.json", clips = root + "/index/clips.jsonl";
  DatasetInfo info;
  if (!attempt([&] { info = parse_dataset_json(dataset_json); }))
    return {problems[0].substr(0, problems[0].find('\n'))};  // nothing else is checkable
  if (!expected_res.empty() && info.res != expected_res)
    problems.push_back(dataset_json + ": res is " + info.res + ", expected " + expected_res + " (--res)");

  if (const auto p = sft_cells_problem(info, dataset_json); !p.empty()) problems.push_back(p);
  std::vector<ClipRow> rows;
  attempt([&] { rows = parse_clips_jsonl(clips, info.cells, &problems); });

  // Text table: dims, null prompt, every prompt of every clip.
  const std::string table_path = text_table.empty() ? root + "/text_table.safetensors" : text_table;
  std::shared_ptr<TextTable> table;
  if (attempt([&] { table = TextTable::open(table_path); })) {
    if (table->text_len() != info.text_len || table->text_dim() != info.text_dim)
      problems.push_back(table_path + ": embeddings are [N, " + std::to_string(table->text_len()) + ", " +
                         std::to_string(table->text_dim()) + "], dataset.json expects [N, " +
                         std::to_string(info.text_len) + ", " + std::to_string(info.text_dim) + "]");
    if (!table->contains(info.null_prompt))
      problems.push_back(table_path + ": the null prompt \"" + info.null_prompt +
                         "\" (dataset.json null_prompt) is not in the text table");
    for (const auto& r : rows)
      for (size_t i = 0; i < r.cells.size(); ++i)
        if (!table->contains(r.cells[i]))
          problems.push_back(clips + ":" + std::to_string(r.line) + ": clip '" + r.clip_id + "' cell " +
                             std::to_string(i) + " has prompt \"" + r.cells[i] + "\", which is not in the text table " +
                             table_path);
  }

  // Leaks: a clip or a run in both splits.
  std::map<std::string, const ClipRow*> train_clip, train_run;
  for (const auto& r : rows)
    if (r.split == "train") train_clip.emplace(r.clip_id, &r), train_run.emplace(r.run, &r);
  std::set<std::string> leaked_runs;
  for (const auto& r : rows) {
    if (r.split != "val") continue;
    if (auto it = train_clip.find(r.clip_id); it != train_clip.end())
      problems.push_back(clips + ": leak: clip '" + r.clip_id + "' is in train (line " +
                         std::to_string(it->second->line) + ") and val (line " + std::to_string(r.line) + ")");
    if (auto it = train_run.find(r.run); it != train_run.end() && leaked_runs.insert(r.run).second)
      problems.push_back(clips + ": leak: run '" + r.run + "' is in train (clip '" + it->second->clip_id + "', line " +
                         std::to_string(it->second->line) + ") and val (clip '" + r.clip_id + "', line " +
                         std::to_string(r.line) + ")");
  }

  // A root whose clips are all validation clips leaves the trainers nothing to train on.
  if (!rows.empty() && train_clip.empty())
    problems.push_back(clips + ": no training clips: all " + std::to_string(rows.size()) + " clips are split \"val\"" +
                       " (prepare it again with fewer validation clips: --val-fraction, or --val-runs naming fewer "
                       "run folders)");

  if (info.model_family == "h3") attempt([&] { read_silence(silence_path(root), info, 1); });
  // Every clip's files (each clip once, even if listed in both splits).
  const int64_t num_parts = vocab_size(info.vocab);
  std::set<std::string> seen;
  for (const auto& r : rows) {
    if (!seen.insert(r.clip_id).second) continue;
    const std::string lat = root + "/latents/" + r.clip_id + ".safetensors";
    std::string cond = root + "/cond/" + r.clip_id + ".safetensors";
    if (!std::filesystem::exists(cond) && std::filesystem::exists(root + "/cond/" + r.clip_id + ".npz"))
      cond = root + "/cond/" + r.clip_id + ".npz";
    const std::string meta = root + "/meta/" + r.clip_id + ".json";
    int64_t f_lat = -1, f_ids = -1;
    attempt([&] { f_lat = read_latents(lat, info).size(1); });
    if (info.model_family == "h3") {  // no id maps: the Picture 1 latents instead (the 2048 one when present)
      attempt([&] { read_picture1(lat, info, "picture1"); });
      if (std::filesystem::exists(lat) && SafetensorsFile::open(lat)->contains("picture1_2048"))
        attempt([&] { read_picture1(lat, info, "picture1_2048"); });
      continue;
    }
    attempt([&] { f_ids = read_ids(cond, info, num_parts).size(0); });
    if (f_lat >= 0 && f_ids >= 0 && f_lat != f_ids)
      problems.push_back(cond + ": ids have " + std::to_string(f_ids) + " frames but latents have " +
                         std::to_string(f_lat) + " (" + lat + ")");
    if (std::filesystem::exists(meta)) attempt([&] { read_meta(meta, f_ids >= 0 ? f_ids : info.latent_frames); });
  }
  for (auto& p : problems) p = p.substr(0, p.find('\n'));  // one line each: errors' "---> HINT:" lines dropped
  return problems;
}

}  // namespace vdt
