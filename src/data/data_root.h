// A data root (docs/design.md §3, docs/data_format.md): dataset.json + index/clips.jsonl + per-clip latents/, cond/,
// meta/ and a text table. DataRoot reads and validates the two index files and names the per-clip paths; check_root
// walks every file of a root and reports every problem, one line each. Not here: reading a clip's tensors (clip_io.h),
// dropout draws and batching (sft_dataset.h), ordering (sampler.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vdt {

inline constexpr const char* kDataFormat = "vdt-latents/1";
inline constexpr uint8_t kCondUnknown = 255;  // "no semantic information here" in cond ids

struct DatasetInfo {
  std::string format, res;           // res "WxH" in pixels, e.g. "832x480"
  std::string model_family = "wan";  // "wan", or "h3" (data/h3_root.h: Picture 1 latents, the silent audio stream)
  int64_t audio_channels = 0;        // h3: audio latent width Da (32)
  int64_t picture1_short_edge = 0;   // h3: pixels on the short edge of the picture1_2048 latents (0: none recorded)
  int64_t latent_channels = 0, latent_frames = 0, latent_h = 0, latent_w = 0, cells = 0, sem_scale = 0;
  std::string vocab;                    // vocabulary of the stored ids: "parts" (K=20) or "ids" (K=10)
  std::vector<int64_t> collapse_parts;  // parts -> ids fold (20 entries in 0..9); required when vocab is "parts"
  int64_t text_dim = 0, text_len = 0;
  std::string null_prompt;
};

struct ClipRow {
  std::string clip_id, split, run;
  bool drop = false;
  std::vector<std::string> cells;  // one prompt per cell
  int line = 0;                    // 1-based line in clips.jsonl
};

// Number of id classes of a vocabulary: parts 20, ids 10; anything else throws naming --vocab.
int64_t vocab_size(const std::string& vocab);
// Parses "WxH" (e.g. "832x480") into {W, H}; throws naming `what` (a flag or file) when malformed.
std::pair<int64_t, int64_t> parse_res(const std::string& res, const std::string& what);

// dataset.json and clips.jsonl parsers. With `problems` null they throw on the first problem; otherwise every
// problem is appended ("<file>: <problem>") and parsing continues where it can (malformed lines are skipped).
DatasetInfo parse_dataset_json(const std::string& path);
std::vector<ClipRow> parse_clips_jsonl(const std::string& path, int64_t cells, std::vector<std::string>* problems);

// The SFT trainer's rule on prompts per latent frame (per-cell text, the Python trainer's CELLS = 21: latent frame f
// cross-attends to cell f only): a Wan root must carry one prompt per latent frame, cells == latent_frames. Returns
// the problem ("<dataset.json>: ..." with a hint) or "" when the root follows it. `vdt data check` and the trainer's
// start-up validation both use it, so they give the same message.
std::string sft_cells_problem(const DatasetInfo& info, const std::string& dataset_json);

class DataRoot {
 public:
  // Reads and validates dataset.json and clips.jsonl (a malformed line is an error naming file:line).
  static DataRoot open(const std::string& root);

  const DatasetInfo& info() const { return info_; }
  const std::string& root() const { return root_; }
  const std::vector<ClipRow>& rows() const { return rows_; }
  std::string dataset_json_path() const { return root_ + "/dataset.json"; }
  std::string clips_path() const { return root_ + "/index/clips.jsonl"; }
  std::string default_text_table() const { return root_ + "/text_table.safetensors"; }

  std::string latent_path(const std::string& clip) const;
  // cond/<clip>.safetensors when present, else cond/<clip>.npz when present, else the .safetensors path.
  std::string cond_path(const std::string& clip) const;
  std::string meta_path(const std::string& clip) const;
  // Number of valid stored id values (20 for "parts"); stored ids must be < this or 255.
  int64_t num_parts() const { return vocab_size(info_.vocab); }

 private:
  std::string root_;
  DatasetInfo info_;
  std::vector<ClipRow> rows_;
};

// Every problem of a root, one line each "<file>: <problem>": dataset.json and clips.jsonl, every latent / cond /
// meta file (presence, shapes, dtypes, id ranges, NaN/Inf), the text table (shapes, null prompt, every prompt of
// every clip), split leaks by clip or run, the SFT trainer's prompts-per-latent-frame rule (sft_cells_problem) on a
// Wan root, and res when `expected_res` is non-empty. Empty = healthy.
// `text_table` defaults to <root>/text_table.safetensors.
std::vector<std::string> check_root(const std::string& root, const std::string& text_table = "",
                                    const std::string& expected_res = "");

}  // namespace vdt
