#include "data/causal_dataset.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "data/clip_io.h"
#include "data/h3_root.h"
#include "data/sampler.h"

namespace vdt {

void CausalDataConfig::validate() const {
  VDT_CHECK(!root.empty(), "--data-root: required (a data root, docs/data_format.md)");
  VDT_CHECK(span_frames >= 1, "span of ", span_frames, " latent frames: expected >= 1 (--chunk-frames)");
  VDT_CHECK(val_clips >= 0, "--val-clips ", val_clips, ": expected >= 0");
  VDT_CHECK(max_samples >= 0, "--max-samples ", max_samples, ": expected >= 0 (0 = all)");
  VDT_CHECK(audio_steps >= 0, "causal data: audio_steps ", audio_steps, " must be >= 0");
}

CausalDataset::CausalDataset(const CausalDataConfig& cfg) : cfg_(cfg), root_(DataRoot::open(cfg.root)) {
  cfg.validate();
  const auto& info = root_.info();
  VDT_CHECK(cfg.res.empty() || cfg.res == info.res, root_.dataset_json_path(), ": res ", info.res,
            " does not match the run's resolution ", cfg.res);
  table_ = TextTable::open(cfg.text_table.empty() ? root_.default_text_table() : cfg.text_table);
  VDT_CHECK(table_->text_dim() == info.text_dim, table_->path(), ": text_dim ", table_->text_dim(),
            " does not match dataset.json text_dim ", info.text_dim);
  const bool h3 = info.model_family == "h3";
  if (h3) {  // the silent stream is checked now (fitted again once the base's clock is known: set_stream_steps)
    silence_ = read_silence(silence_path(cfg.root), info, std::max<int64_t>(cfg.audio_steps, 1));
    start_align_ = 5;
  }
  // Usable clips in clips.jsonl order: flagged ones and streams shorter than a span are counted and left out.
  for (const auto& row : root_.rows()) {
    if (row.drop) {
      ++n_flagged_;
      continue;
    }
    const int64_t frames = latent_stream_frames(root_.latent_path(row.clip_id), info);
    if (frames < cfg.span_frames) {
      ++n_short_;
      continue;
    }
    if (h3) {  // every usable clip has the chosen Picture 1 (checked now, not at its first window)
      const auto [hp, wp] = check_picture1_header(root_.latent_path(row.clip_id), info, picture1_key(cfg.picture1));
      if (clips_.empty()) picture1_rows_ = (hp / 2) * (wp / 2);
    }
    CausalClip c{row.clip_id, frames, {}};
    std::vector<int64_t> cell_rows;
    for (const auto& p : row.cells) cell_rows.push_back(table_->row_of(p));  // names the prompt and the table
    VDT_CHECK(!cell_rows.empty(), root_.clips_path(), ":", row.line, ": clip ", row.clip_id, " has no cells");
    for (int64_t f = 0; f < frames; ++f)
      c.frame_rows.push_back(cell_rows[std::min<size_t>(static_cast<size_t>(f), cell_rows.size() - 1)]);
    clips_.push_back(std::move(c));
  }
  const int64_t n = static_cast<int64_t>(clips_.size());
  VDT_CHECK(n > cfg.val_clips, cfg.root, ": ", n, " usable clips (", n_flagged_, " flagged, ", n_short_,
            " shorter than the span of ", cfg.span_frames, " latent frames) leave none for training with --val-clips ",
            cfg.val_clips);
  // Val clips: the first val_clips of a permutation that depends on the seed only.
  const auto perm = epoch_permutation(RngStream(cfg.seed, rng_purpose::kValClips).u64(0, 0), 0, n);
  std::vector<bool> is_val(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < cfg.val_clips; ++i) is_val[static_cast<size_t>(perm[static_cast<size_t>(i)])] = true;
  for (int64_t c = 0; c < n; ++c)
    for (int64_t j = 0; (clips_[static_cast<size_t>(c)].frames - cfg.span_frames) / stride() >= j; ++j)
      (is_val[static_cast<size_t>(c)] ? val_ : train_).push_back({c, j});
  if (cfg.max_samples > 0 && static_cast<int64_t>(train_.size()) > cfg.max_samples)
    train_.resize(static_cast<size_t>(cfg.max_samples));
}

std::vector<std::string> CausalDataset::stream_names() const {
  return root_.info().model_family == "h3" ? std::vector<std::string>{"audio"} : std::vector<std::string>{};
}

void CausalDataset::set_stream_steps(const std::string& name, int64_t steps) {
  VDT_CHECK(name == "audio" && root_.info().model_family == "h3", cfg_.root, ": no side stream '", name,
            "' in this root (h3 roots carry \"audio\")");
  cfg_.audio_steps = steps;
  silence_ = read_silence(silence_path(cfg_.root), root_.info(), steps);
}

int64_t CausalDataset::stride() const { return (cfg_.span_frames + start_align_ - 1) / start_align_ * start_align_; }

int64_t CausalDataset::train_start(int64_t index, int64_t epoch) const {
  const auto& w = train_.at(static_cast<size_t>(index));
  const int64_t frames = clips_[static_cast<size_t>(w.clip)].frames, span = cfg_.span_frames;
  const int64_t slots = (frames - span) / stride() + 1;
  const int64_t slack = (frames - (slots - 1) * stride() - span) / start_align_;  // offsets no slot start covers
  const double u = RngStream(cfg_.seed, rng_purpose::kWindowStart)
                       .uniform(static_cast<uint64_t>(epoch), static_cast<uint32_t>(index));
  return w.slot * stride() +
         start_align_ * std::min<int64_t>(static_cast<int64_t>(u * static_cast<double>(slack + 1)), slack);
}

int64_t CausalDataset::val_start(int64_t index) const { return val_.at(static_cast<size_t>(index)).slot * stride(); }

CausalSample CausalDataset::load(const WindowRef& w, int64_t start) const {
  const auto& c = clips_.at(static_cast<size_t>(w.clip));
  CausalSample s;
  s.clip_id = c.clip_id, s.start = start;
  s.latents = read_latents(root_.latent_path(c.clip_id), root_.info(), cfg_.span_frames, start);  // [C, span, H, W]
  s.text_rows.assign(c.frame_rows.begin() + start, c.frame_rows.begin() + start + cfg_.span_frames);
  if (root_.info().model_family == "h3") {
    s.cond["picture1"] = read_picture1(root_.latent_path(c.clip_id), root_.info(), picture1_key(cfg_.picture1));
    if (cfg_.audio_steps > 0) s.streams["audio"] = silence_;
  }
  return s;
}

void CausalDataset::text_of(const std::vector<int64_t>& rows, torch::Tensor* context, torch::Tensor* context_ids,
                            torch::Tensor* tags) const {
  std::vector<int64_t> distinct;
  std::map<int64_t, int64_t> at;
  std::vector<int64_t> ids;
  for (int64_t r : rows) {
    auto it = at.find(r);
    if (it == at.end()) it = at.emplace(r, static_cast<int64_t>(distinct.size())).first, distinct.push_back(r);
    ids.push_back(it->second);
  }
  *context = table_->rows(distinct);               // [R, Lt, text_dim]
  *context_ids = torch::tensor(ids).unsqueeze(0);  // [1, span]
  if (tags) *tags = table_->tags(distinct);        // [R, Lt] or undefined
}

int64_t CausalDataset::max_text_rows() const {
  int64_t most = 1;
  const auto span = static_cast<size_t>(cfg_.span_frames);
  for (const auto& c : clips_) {
    const auto& rows = c.frame_rows;
    std::map<int64_t, int64_t> in_window;  // text row -> frames of the window holding it; one pass a clip
    for (size_t f = 0; f < rows.size(); ++f) {
      ++in_window[rows[f]];
      if (f >= span && --in_window[rows[f - span]] == 0) in_window.erase(rows[f - span]);
      if (f + 1 >= span) most = std::max(most, static_cast<int64_t>(in_window.size()));
    }
  }
  return most;
}

}  // namespace vdt
