// Text table reader: validates the whole file at open so lookups and row copies cannot fail later except on an
// unknown prompt or an out-of-range row.
#include "data/text_table.h"

#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"

namespace vdt {

std::shared_ptr<TextTable> TextTable::open(const std::string& path) {
  std::shared_ptr<TextTable> t(new TextTable());
  t->path_ = path;
  t->file_ = SafetensorsFile::open(path);
  const auto& f = *t->file_;
  for (const char* key : {"embeddings", "lengths"})
    VDT_CHECK(f.contains(key), path, ": text table has no tensor '", key,
              "'\n---> HINT: a text table holds \"embeddings\" [N, Lt, text_dim] bf16 and \"lengths\" [N] int32");
  const auto& emb = f.entry("embeddings");
  VDT_CHECK(emb.dtype == "BF16", path, ": tensor 'embeddings' has dtype ", emb.dtype, ", expected BF16");
  VDT_CHECK(emb.shape.size() == 3, path, ": tensor 'embeddings' has ", emb.shape.size(),
            " dims, expected [N, Lt, text_dim]");
  const auto& len = f.entry("lengths");
  VDT_CHECK(len.dtype == "I32", path, ": tensor 'lengths' has dtype ", len.dtype, ", expected I32");
  VDT_CHECK(len.shape.size() == 1 && len.shape[0] == emb.shape[0], path,
            ": tensor 'lengths' must be [N] with N = ", emb.shape[0], " (rows of 'embeddings')");
  const int64_t n = emb.shape[0];
  t->text_len_ = emb.shape[1];
  t->text_dim_ = emb.shape[2];
  t->embeddings_ = f.get("embeddings");
  if (f.contains("tags")) {
    const auto& tg = f.entry("tags");
    VDT_CHECK(tg.dtype == "U8" && tg.shape.size() == 2 && tg.shape[0] == n && tg.shape[1] == t->text_len_, path,
              ": tensor 'tags' must be [N=", n, ", Lt=", t->text_len_, "] uint8 (1 text, 0 vision token), found ",
              tg.dtype, " of ", tg.shape.size(), " dims");
    t->tags_ = f.get("tags");
    VDT_CHECK(t->tags_.le(1).all().item<bool>(), path, ": tensor 'tags' holds values other than 0 and 1");
  }
  auto lengths = f.get("lengths").contiguous();
  t->lengths_.assign(lengths.data_ptr<int32_t>(), lengths.data_ptr<int32_t>() + n);
  for (int64_t i = 0; i < n; ++i)
    VDT_CHECK(t->lengths_[i] >= 0 && t->lengths_[i] <= t->text_len_, path, ": lengths[", i, "] = ", t->lengths_[i],
              ", expected 0..", t->text_len_);

  const auto it = f.metadata().find("prompts");
  VDT_CHECK(it != f.metadata().end(), path, ": metadata has no 'prompts' (a JSON list of the ", n,
            " prompt strings, row order)");
  nlohmann::json prompts;
  try {
    prompts = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    VDT_FAIL(path, ": metadata 'prompts' is not valid JSON (", e.what(), ")");
  }
  VDT_CHECK(prompts.is_array(), path, ": metadata 'prompts' must be a JSON list of strings");
  VDT_CHECK(static_cast<int64_t>(prompts.size()) == n, path, ": metadata 'prompts' lists ", prompts.size(),
            " prompts but 'embeddings' has ", n, " rows");
  for (const auto& p : prompts) {
    VDT_CHECK(p.is_string(), path, ": metadata 'prompts' entry ", t->prompts_.size(), " is not a string");
    const std::string s = p.get<std::string>();
    auto [pos, fresh] = t->index_.emplace(s, static_cast<int64_t>(t->prompts_.size()));
    VDT_CHECK(fresh, path, ": prompt \"", s, "\" appears twice (rows ", pos->second, " and ", t->prompts_.size(),
              "); lookup is by prompt text, so every prompt must be unique");
    t->prompts_.push_back(s);
  }
  t->check_finite();
  return t;
}

void TextTable::check_finite() const {
  // A NaN or Inf embedding passes every shape check and then stops training on a non-finite loss, far from its cause:
  // one pass over the table at open, in blocks of rows (a 5B table can hold tens of GB).
  const int64_t n = embeddings_.size(0), block = 256;
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const auto rows = embeddings_.narrow(0, r0, std::min(block, n - r0));  // [b, Lt, text_dim]
    const auto bad = (~torch::isfinite(rows)).flatten(1).sum(1);           // [b]
    if (!bad.any().item<bool>()) continue;
    const int64_t i = bad.nonzero()[0][0].item<int64_t>();
    const int64_t rows_bad = (bad > 0).sum().item<int64_t>();
    VDT_FAIL(path_, ": tensor 'embeddings' row ", r0 + i, " (prompt \"", prompts_[static_cast<size_t>(r0 + i)],
             "\") holds ", bad[i].item<int64_t>(), " NaN/Inf values",
             rows_bad > 1 ? " (and " + std::to_string(rows_bad - 1) + " more rows of this block)" : std::string(),
             "\n---> HINT: re-encode the text table; a non-finite embedding makes every loss that uses it NaN");
  }
}

int64_t TextTable::row_of(const std::string& prompt) const {
  const auto it = index_.find(prompt);
  VDT_CHECK(it != index_.end(), path_, ": prompt \"", prompt, "\" is not in the text table (", size(),
            " prompts)\n---> HINT: re-encode the text table with every prompt of index/clips.jsonl");
  return it->second;
}

int64_t TextTable::length(int64_t row) const {
  VDT_CHECK(row >= 0 && row < size(), path_, ": row ", row, " out of range [0, ", size(), ")");
  return lengths_[row];
}

torch::Tensor TextTable::rows(const std::vector<int64_t>& idx) const {
  for (const int64_t r : idx) VDT_CHECK(r >= 0 && r < size(), path_, ": row ", r, " out of range [0, ", size(), ")");
  auto index = torch::tensor(idx, torch::kLong);
  return embeddings_.index_select(0, index);  // [R, Lt, text_dim], a fresh copy
}

torch::Tensor TextTable::tags(const std::vector<int64_t>& idx) const {
  if (!tags_.defined()) return {};
  for (const int64_t r : idx) VDT_CHECK(r >= 0 && r < size(), path_, ": row ", r, " out of range [0, ", size(), ")");
  return tags_.index_select(0, torch::tensor(idx, torch::kLong)).to(torch::kLong);  // [R, Lt]
}

}  // namespace vdt
