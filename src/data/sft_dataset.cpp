// SftDataset: the split's rows resolved eagerly (res, vocab fold, text table, prompts, file headers), samples loaded
// lazily with their dropouts; collate builds the per-batch de-duplicated text context.
#include "data/sft_dataset.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "core/rng_purposes.h"

namespace vdt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join_first(const std::vector<std::string>& xs, size_t k) {
  std::string out;
  for (size_t i = 0; i < xs.size() && i < k; ++i) out += (i ? ", " : "") + xs[i];
  if (xs.size() > k) out += ", ...";
  return out;
}

}  // namespace

void SftDataConfig::validate() const {
  VDT_CHECK(!root.empty(), "--data_root: no data root given");
  VDT_CHECK(split == "train" || split == "val", "split: '", split, "', expected train or val");
  vocab_size(vocab);
  parse_res(res, "--res");
  const std::pair<const char*, double> probs[] = {
      {"--text_dropout", text_dropout}, {"--cond_dropout", cond_dropout}, {"--mask_p", mask_p}};
  for (const auto& [flag, p] : probs)
    VDT_CHECK(std::isfinite(p) && p >= 0 && p <= 1, flag, ": ", p, " is not a probability, expected 0 <= p <= 1");
  VDT_CHECK(limit >= 0, "--limit: ", limit, ", expected >= 0 (0 = all clips)");
}

SftDraws draw_sft(uint64_t seed, int64_t epoch, int64_t index, double text_dropout, double cond_dropout,
                  double mask_p) {
  // Counters: a = dataset index, b = epoch; one stream per decision so changing one probability leaves the
  // others' draws unchanged.
  const uint64_t a = static_cast<uint64_t>(index);
  const uint32_t b = static_cast<uint32_t>(epoch);
  const RngStream text(seed, rng_purpose::kTextDropout), cond(seed, rng_purpose::kCondDropout),
      mask(seed, rng_purpose::kMask);
  SftDraws d;
  d.text_drop = text.uniform(a, b) < text_dropout;
  d.cond_drop = cond.uniform(a, b) < cond_dropout;
  d.mask = !d.cond_drop && mask.uniform(a, b, 0) < mask_p;
  if (d.mask) {
    // Centre uniform in the unit square of world coordinates, sides 0.2..0.5 of it.
    const double cx = mask.uniform(a, b, 1), cy = mask.uniform(a, b, 2);
    const double w = 0.2 + 0.3 * mask.uniform(a, b, 3), h = 0.2 + 0.3 * mask.uniform(a, b, 4);
    d.x0 = cx - w / 2, d.x1 = cx + w / 2, d.y0 = cy - h / 2, d.y1 = cy + h / 2;
  }
  return d;
}

double apply_world_mask(torch::Tensor& ids, const std::vector<Affine2D>& world_to_image, const SftDraws& d) {
  TORCH_CHECK(ids.dim() == 3 && ids.scalar_type() == torch::kByte && ids.is_contiguous(),
              "apply_world_mask: ids must be contiguous uint8 [F, Hs, Ws], got ", ids.sizes());
  const int64_t nf = ids.size(0), hs = ids.size(1), ws = ids.size(2);
  TORCH_CHECK(static_cast<int64_t>(world_to_image.size()) >= nf, "apply_world_mask: ", world_to_image.size(),
              " affines for ", nf, " frames");
  uint8_t* p = ids.data_ptr<uint8_t>();
  int64_t covered = 0;
  for (int64_t f = 0; f < nf; ++f) {
    const auto& m = world_to_image[f];
    const double det = m[0] * m[4] - m[1] * m[3];
    for (int64_t r = 0; r < hs; ++r)
      for (int64_t c = 0; c < ws; ++c) {
        // Pixel centre in normalised image coordinates, mapped back to the world: x = A^-1 (u - t).
        const double u = (c + 0.5) / ws - m[2], v = (r + 0.5) / hs - m[5];
        const double x = (m[4] * u - m[1] * v) / det, y = (-m[3] * u + m[0] * v) / det;
        if (x >= d.x0 && x <= d.x1 && y >= d.y0 && y <= d.y1) {
          p[(f * hs + r) * ws + c] = kCondUnknown;
          ++covered;
        }
      }
  }
  return nf * hs * ws > 0 ? static_cast<double>(covered) / static_cast<double>(nf * hs * ws) : 0.0;
}

SftBatch SftBatch::pin_memory() const {
  if (!torch::cuda::is_available()) return *this;
  SftBatch b;
  b.clip_ids = clip_ids;
  b.latents = latents.pin_memory();
  b.ids = ids.pin_memory();
  b.context = context.pin_memory();
  b.context_ids = context_ids.pin_memory();
  b.text_drop = text_drop.pin_memory();
  b.cond_drop = cond_drop.pin_memory();
  b.mask_frac = mask_frac.pin_memory();
  return b;
}

SftDataset::SftDataset(const SftDataConfig& cfg, std::shared_ptr<TextTable> table) : cfg_(cfg) {
  cfg_.validate();
  root_ = DataRoot::open(cfg_.root);
  const DatasetInfo& info = root_.info();
  VDT_CHECK(info.res == cfg_.res, root_.dataset_json_path(), ": res is ", info.res, " but this run's resolution is ",
            cfg_.res, " (--res / GC_RES)\n---> HINT: run with --res ", info.res, " (or GC_RES=", info.res,
            "), or use a data root prepared at ", cfg_.res);

  // Vocabulary: stored ids are folded into the training vocabulary (parts -> ids through collapse_parts).
  fold_.fill(kCondUnknown);
  const int64_t k_stored = vocab_size(info.vocab);
  if (cfg_.vocab == info.vocab) {
    for (int64_t i = 0; i < k_stored; ++i) fold_[i] = static_cast<uint8_t>(i);
  } else {
    VDT_CHECK(info.vocab == "parts" && cfg_.vocab == "ids", "--vocab ", cfg_.vocab, ": ", root_.dataset_json_path(),
              " stores vocab '", info.vocab, "', which cannot be expanded to '", cfg_.vocab, "'");
    for (int64_t i = 0; i < k_stored; ++i) fold_[i] = static_cast<uint8_t>(info.collapse_parts.at(i));
  }

  table_ = table ? std::move(table)
                 : TextTable::open(cfg_.text_table.empty() ? root_.default_text_table() : cfg_.text_table);
  VDT_CHECK(table_->text_len() == info.text_len && table_->text_dim() == info.text_dim, table_->path(),
            ": embeddings are [N, ", table_->text_len(), ", ", table_->text_dim(), "], dataset.json expects [N, ",
            info.text_len, ", ", info.text_dim, "] (text_len, text_dim)");
  VDT_CHECK(table_->contains(info.null_prompt), table_->path(), ": the null prompt \"", info.null_prompt,
            "\" (dataset.json null_prompt) is not in the text table\n---> HINT: text dropout replaces every cell "
            "with it; encode it into the table");
  null_row_ = table_->row_of(info.null_prompt);

  // The Python trainer's GcLatentDataset: drop rows out unless --include_dropped (train only), then --limit.
  for (const ClipRow& r : root_.rows()) {
    if (r.split != cfg_.split) continue;
    ++n_total_;
    if (r.drop && !(cfg_.include_dropped && cfg_.split == "train")) {
      ++n_dropped_;
      continue;
    }
    if (cfg_.limit > 0 && static_cast<int64_t>(rows_.size()) >= cfg_.limit) continue;
    rows_.push_back(r);
  }
  for (const ClipRow& r : rows_) {
    std::vector<int64_t> ids;
    for (size_t i = 0; i < r.cells.size(); ++i) {
      VDT_CHECK(table_->contains(r.cells[i]), root_.clips_path(), ":", r.line, ": clip '", r.clip_id, "' cell ", i,
                " has prompt \"", r.cells[i], "\", which is not in the text table ", table_->path(),
                "\n---> HINT: re-encode the text table with every prompt of index/clips.jsonl");
      ids.push_back(table_->row_of(r.cells[i]));
    }
    text_rows_.push_back(std::move(ids));
    clip_ids_.push_back(r.clip_id);
    check_latents_header(root_.latent_path(r.clip_id), info);
    const std::string cond = root_.cond_path(r.clip_id);
    if (!ends_with(cond, ".npz")) check_ids_header(cond, info);
    // The world-anchored mask reads meta/<clip>.json when the clip is first masked, possibly hours in: parse it now.
    if (cfg_.split == "train" && cfg_.mask_p > 0) read_meta(root_.meta_path(r.clip_id), info.latent_frames);
  }
}

std::set<std::string> SftDataset::runs() const {
  std::set<std::string> out;
  for (const auto& r : rows_) out.insert(r.run);
  return out;
}

const ClipRow& SftDataset::row(size_t index) const {
  VDT_CHECK(index < rows_.size(), "dataset index ", index, " out of range [0, ", rows_.size(), ")");
  return rows_[index];
}

SftSample SftDataset::get(size_t index, int64_t epoch) const {
  row(index);
  SftDraws d;
  if (cfg_.split == "train")
    d = draw_sft(cfg_.seed, epoch, static_cast<int64_t>(index), cfg_.text_dropout, cfg_.cond_dropout, cfg_.mask_p);
  return load(index, d);
}

SftSample SftDataset::get_with(size_t index, bool text_drop, bool cond_drop) const {
  SftDraws d;
  d.text_drop = text_drop;
  d.cond_drop = cond_drop;
  return load(index, d);
}

SftSample SftDataset::load(size_t index, const SftDraws& d) const {
  const ClipRow& r = row(index);
  const DatasetInfo& info = root_.info();
  SftSample s;
  s.clip_id = r.clip_id;
  s.run = r.run;
  s.index = static_cast<int64_t>(index);
  s.latents = read_latents(root_.latent_path(r.clip_id), info, info.latent_frames);           // [C, F, H, W] bf16
  s.ids = read_ids(root_.cond_path(r.clip_id), info, root_.num_parts(), info.latent_frames);  // [F, Hs, Ws] u8
  uint8_t* p = s.ids.data_ptr<uint8_t>();
  const int64_t n = s.ids.numel();
  if (d.cond_drop) {
    s.ids.fill_(kCondUnknown);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = fold_[p[i]];
    if (d.mask) s.mask_frac = apply_world_mask(s.ids, read_meta(root_.meta_path(r.clip_id), info.latent_frames), d);
  }
  s.text_drop = d.text_drop;
  s.cond_drop = d.cond_drop;
  s.text_rows = d.text_drop ? std::vector<int64_t>(r.cells.size(), null_row_) : text_rows_[index];
  return s;
}

void check_no_leak(const DataRoot& root) {
  std::map<std::string, const ClipRow*> train_clip, train_run;
  for (const auto& r : root.rows())
    if (r.split == "train") train_clip.emplace(r.clip_id, &r), train_run.emplace(r.run, &r);
  std::vector<std::string> clips, runs;
  std::set<std::string> leaked_runs;
  for (const auto& r : root.rows()) {
    if (r.split != "val") continue;
    if (auto it = train_clip.find(r.clip_id); it != train_clip.end())
      clips.push_back("'" + r.clip_id + "' (lines " + std::to_string(it->second->line) + " and " +
                      std::to_string(r.line) + ")");
    if (auto it = train_run.find(r.run); it != train_run.end() && leaked_runs.insert(r.run).second)
      runs.push_back("'" + r.run + "' (train clip '" + it->second->clip_id + "' line " +
                     std::to_string(it->second->line) + ", val clip '" + r.clip_id + "' line " +
                     std::to_string(r.line) + ")");
  }
  VDT_CHECK(clips.empty() && runs.empty(), root.clips_path(), ": train/val leak: ", clips.size(),
            " clip(s) in both splits (", join_first(clips, 3), ") and ", runs.size(), " run(s) in both splits (",
            join_first(runs, 3),
            ")\n---> HINT: every clip and every run must belong to one split only (`vdt data "
            "check` lists them all)");
}

int64_t SftDataset::max_text_rows() const {
  int64_t most = 1;
  for (const auto& cells : text_rows_)
    most = std::max(most, static_cast<int64_t>(std::set<int64_t>(cells.begin(), cells.end()).size()));
  return most;
}

SftBatch collate(const std::vector<SftSample>& samples, const TextTable& table) {
  VDT_CHECK(!samples.empty(), "collate: empty batch");
  SftBatch b;
  std::vector<torch::Tensor> lat, ids;
  std::map<int64_t, int64_t> slot;  // table row -> index in context, in order of first appearance
  std::vector<int64_t> distinct;
  const int64_t b_size = static_cast<int64_t>(samples.size());
  const int64_t cells = static_cast<int64_t>(samples[0].text_rows.size());
  b.context_ids = torch::empty({b_size, cells}, torch::kLong);
  b.text_drop = torch::empty({b_size}, torch::kFloat);
  b.cond_drop = torch::empty({b_size}, torch::kFloat);
  b.mask_frac = torch::empty({b_size}, torch::kFloat);
  auto cid = b.context_ids.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b_size; ++i) {
    const SftSample& s = samples[i];
    VDT_CHECK(s.latents.sizes() == samples[0].latents.sizes() && s.ids.sizes() == samples[0].ids.sizes() &&
                  static_cast<int64_t>(s.text_rows.size()) == cells,
              "collate: clip '", s.clip_id, "' has latents ", s.latents.sizes(), " / ids ", s.ids.sizes(),
              ", unlike clip '", samples[0].clip_id, "' (", samples[0].latents.sizes(), " / ", samples[0].ids.sizes(),
              ")");
    b.clip_ids.push_back(s.clip_id);
    lat.push_back(s.latents);
    ids.push_back(s.ids);
    for (int64_t c = 0; c < cells; ++c) {
      auto [it, fresh] = slot.emplace(s.text_rows[c], static_cast<int64_t>(distinct.size()));
      if (fresh) distinct.push_back(s.text_rows[c]);
      cid[i][c] = it->second;
    }
    b.text_drop[i] = s.text_drop ? 1.0f : 0.0f;
    b.cond_drop[i] = s.cond_drop ? 1.0f : 0.0f;
    b.mask_frac[i] = static_cast<float>(s.mask_frac);
  }
  b.latents = torch::stack(lat);     // [B, C, F, H, W]
  b.ids = torch::stack(ids);         // [B, F, Hs, Ws]
  b.context = table.rows(distinct);  // [R, Lt, text_dim]
  return b;
}

}  // namespace vdt
