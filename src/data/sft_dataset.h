// The SFT dataset of the Python trainer's GcLatentDataset (gc25d_train.py): one split of a data root, drop rows
// left out, res checked, prompts resolved against the text table, and three per-sample dropouts (text, cond, a world-
// anchored UNKNOWN mask) drawn from (seed, epoch, index) only, so any rank, worker or resume draws the same.
// Not here: ordering (sampler.h), threads (loader.h), devices.
#pragma once
#include <torch/types.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/rng_purposes.h"
#include "data/clip_io.h"
#include "data/data_root.h"
#include "data/text_table.h"

namespace vdt {

// RngStream purposes of the data draws (distinct so the three decisions are independent).

struct SftDataConfig {
  std::string root, text_table /* default <root>/text_table.safetensors */, split = "train", vocab = "parts",
                                                                            res = "832x480";
  double text_dropout = 0.1, cond_dropout = 0.05, mask_p = 0.5;
  bool include_dropped = false;
  int64_t limit = 0;  // 0 = all
  uint64_t seed = 0;
  void validate() const;  // throws naming the flag (--text_dropout etc.)
};

// The three decisions of one sample. The mask is a world-space rectangle [x0, x1] x [y0, y1].
struct SftDraws {
  bool text_drop = false, cond_drop = false, mask = false;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};
// Draws for dataset index `index` in `epoch`: a pure function of (seed, epoch, index) and the probabilities.
SftDraws draw_sft(uint64_t seed, int64_t epoch, int64_t index, double text_dropout, double cond_dropout, double mask_p);
// Sets to UNKNOWN every pixel of ids [F, Hs, Ws] whose centre maps (through the inverse of its frame's affine) into
// the world rectangle of `d`; returns the fraction of pixels covered.
double apply_world_mask(torch::Tensor& ids, const std::vector<Affine2D>& world_to_image, const SftDraws& d);

struct SftSample {
  std::string clip_id, run;
  int64_t index = 0;
  torch::Tensor latents;           // [C, F, H, W] bf16 (first latent_frames frames)
  torch::Tensor ids;               // [F, Hs, Ws] uint8, vocab-mapped, dropout/mask applied (255 = UNKNOWN)
  std::vector<int64_t> text_rows;  // [cells] text-table row per cell (all the null prompt's row under text dropout)
  bool text_drop = false, cond_drop = false;
  double mask_frac = 0;  // fraction of id pixels the mask set to UNKNOWN
};

struct SftBatch {
  std::vector<std::string> clip_ids;
  torch::Tensor latents;                          // [B, C, F, H, W] bf16
  torch::Tensor ids;                              // [B, F, Hs, Ws] uint8
  torch::Tensor context;                          // [R, Lt, text_dim] bf16: the distinct text rows, each once
  torch::Tensor context_ids;                      // [B, cells] int64 index into `context`
  torch::Tensor text_drop, cond_drop, mask_frac;  // [B] float32
  SftBatch pin_memory() const;                    // pinned copies when CUDA is available, else itself
};

class SftDataset {
 public:
  // Validates eagerly: cfg, dataset.json, res == cfg.res, vocab, text table dims and null prompt, every prompt of
  // the split, and the presence and headers of every latent / cond file. split == "val" never includes drop rows
  // and applies no dropout.
  explicit SftDataset(const SftDataConfig& cfg, std::shared_ptr<TextTable> table = nullptr);

  size_t size() const { return rows_.size(); }
  const std::vector<std::string>& clip_ids() const { return clip_ids_; }
  std::set<std::string> runs() const;
  int64_t n_total() const { return n_total_; }      // rows of the split in clips.jsonl
  int64_t n_dropped() const { return n_dropped_; }  // rows of the split left out as drop:true
  const DatasetInfo& info() const { return root_.info(); }
  const DataRoot& root() const { return root_; }
  const SftDataConfig& config() const { return cfg_; }
  std::shared_ptr<TextTable> text_table() const { return table_; }
  const ClipRow& row(size_t index) const;
  // The most distinct text rows one sample holds (its cells' prompts; the memory plan's text keys and values).
  int64_t max_text_rows() const;

  // Sample `index` of `epoch` with its dropout draws (none for val); thread-safe.
  SftSample get(size_t index, int64_t epoch) const;
  // For validation variants: the given text / cond dropout, no random draws, mask off.
  SftSample get_with(size_t index, bool text_drop, bool cond_drop) const;

 private:
  SftSample load(size_t index, const SftDraws& d) const;

  SftDataConfig cfg_;
  DataRoot root_;
  std::shared_ptr<TextTable> table_;
  std::vector<ClipRow> rows_;
  std::vector<std::string> clip_ids_;
  std::vector<std::vector<int64_t>> text_rows_;  // per row: table row per cell
  int64_t null_row_ = 0, n_total_ = 0, n_dropped_ = 0;
  std::array<uint8_t, 256> fold_{};  // stored id -> training vocabulary id
};

// A clip or a run in both splits is a leak: throws listing a few of each with their clips.jsonl lines. Checks every
// row of the root's index (dropped rows and clips past --limit / --val_n included), so a leak is found whatever the
// validation flags, and the splits a run uses (subsets of those rows) need no check of their own.
void check_no_leak(const DataRoot& root);
// Stacks samples (same shapes) into a batch; the context holds each distinct text row once.
SftBatch collate(const std::vector<SftSample>& samples, const TextTable& table);

}  // namespace vdt
