// The causal workflow's samples (docs/design.md §5, the Python trainer's rtcwm.train.dataset): windows of `span_frames`
// latent frames cut from each clip's latent stream. A clip of F frames holds n = floor(F / span) window slots, each one
// sample; slot j of a clip starts at j * span + an offset drawn per (seed, epoch, sample) from 0 .. F - n * span, so
// every window stays inside the stream and every epoch sees other cuts — on any rank, at any world size, after any
// resume. Train/val split by clip (`--val-clips` clips, chosen from --seed; the clips.jsonl split column is not used,
// as in the Python trainer), flagged (drop:true) clips left out and counted, streams shorter than one span left out and
// counted. Validation windows start at their slot (no draw). Text: each latent frame takes its cell's prompt (frames
// past the last cell take the last cell's). H3 roots (data/h3_root.h) also give each window its clip's Picture 1 and
// the silent audio stream, and start windows on VAE-clip boundaries (multiples of 5 latents; slots every span rounded
// up to that) so the rotary frame times hold. Not here: ordering over samples (data/sampler.h), noise, devices.
#pragma once
#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/rng_purposes.h"
#include "data/data_root.h"
#include "data/text_table.h"

namespace vdt {

struct CausalDataConfig {
  std::string root, text_table;             // text_table default: <root>/text_table.safetensors
  std::string res;                          // when set, must equal dataset.json res
  int64_t span_frames = 18;                 // chunks x chunk_frames
  int64_t val_clips = 12, max_samples = 0;  // max_samples: cap the training set (0 = all)
  uint64_t seed = 0;
  std::string picture1 = "native";  // h3 roots: which Picture 1 latent a window carries (--picture1 native | 2048)
  int64_t audio_steps = 0;          // h3 roots: audio steps per window (set_stream_steps); 0 = no audio stream yet
  void validate() const;            // names the flag at fault
};

struct WindowRef {
  int64_t clip = 0;  // index into CausalDataset::clips()
  int64_t slot = 0;
};

struct CausalClip {
  std::string clip_id;
  int64_t frames = 0;               // latent frames of the stream
  std::vector<int64_t> frame_rows;  // text-table row per latent frame [frames]
};

struct CausalSample {
  std::string clip_id;
  int64_t start = 0;
  torch::Tensor latents;                         // [C, span, H, W] bf16
  std::vector<int64_t> text_rows;                // [span] text-table row per latent frame
  std::map<std::string, torch::Tensor> cond;     // h3: "picture1" [C, 1, Hp, Wp] bf16
  std::map<std::string, torch::Tensor> streams;  // h3: "audio" [2, Da, audio_steps] bf16, clean (the silence)
};

class CausalDataset {
 public:
  // Validates eagerly: cfg, dataset.json (res when given), the text table, every prompt, every latent header.
  explicit CausalDataset(const CausalDataConfig& cfg);

  const std::vector<WindowRef>& train() const { return train_; }
  const std::vector<WindowRef>& val() const { return val_; }
  const std::vector<CausalClip>& clips() const { return clips_; }
  int64_t n_flagged() const { return n_flagged_; }          // drop:true clips left out
  int64_t n_short() const { return n_short_; }              // streams shorter than one span, left out
  int64_t picture1_rows() const { return picture1_rows_; }  // h3: DiT rows of the first clip's Picture 1
  const DatasetInfo& info() const { return root_.info(); }
  std::shared_ptr<TextTable> text_table() const { return table_; }
  const CausalDataConfig& config() const { return cfg_; }

  // The start frame of train sample `index` (into train()) in `epoch`: a pure function of (seed, epoch, index).
  int64_t train_start(int64_t index, int64_t epoch) const;
  // Validation windows start at their slot.
  int64_t val_start(int64_t index) const;
  // The side streams a window carries (h3 roots: "audio", the silent stream); set_stream_steps fits one to `steps`
  // (the base's clock for the span: Denoiser::side_stream_chunks).
  std::vector<std::string> stream_names() const;
  void set_stream_steps(const std::string& name, int64_t steps);
  // Reads a window (thread-safe).
  CausalSample load(const WindowRef& w, int64_t start) const;
  // The text rows [R, Lt, text_dim] and the row index per frame [span] for a sample's text_rows; with `tags`, the
  // token tags [R, Lt] when the table has them (H3), else undefined.
  void text_of(const std::vector<int64_t>& rows, torch::Tensor* context, torch::Tensor* context_ids,
               torch::Tensor* tags = nullptr) const;
  // The most distinct text rows one window of the span holds, over every start of every clip (the memory plan's
  // text keys and values); at least 1.
  int64_t max_text_rows() const;

 private:
  CausalDataConfig cfg_;
  DataRoot root_;
  std::shared_ptr<TextTable> table_;
  std::vector<CausalClip> clips_;
  std::vector<WindowRef> train_, val_;
  int64_t n_flagged_ = 0, n_short_ = 0, picture1_rows_ = 0;
  torch::Tensor silence_;    // h3: [2, Da, audio_steps]
  int64_t start_align_ = 1;  // windows start at multiples of this: 5 (one VAE clip) on h3 roots, else 1
  int64_t stride() const;    // frames between window slots
};

}  // namespace vdt
