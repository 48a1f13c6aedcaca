// The precomputed text table: T5 (UMT5-XXL) outputs of every distinct prompt of a root, one row per prompt, looked up
// by the prompt's text. File: "embeddings" [N, Lt, text_dim] bf16 (padded with zero rows), "lengths" [N] int32,
// metadata "prompts" = JSON list of N strings; optional "tags" [N, Lt] uint8 (H3: 0 marks vision tokens). The file
// stays memory-mapped; rows() copies the rows it is asked for. Not here: running a text encoder.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace vdt {

class SafetensorsFile;

class TextTable {
 public:
  // Opens and validates the table (tensors, dtypes, shapes, prompt list, no duplicate prompts, every embedding finite).
  static std::shared_ptr<TextTable> open(const std::string& path);

  int64_t size() const { return static_cast<int64_t>(prompts_.size()); }
  int64_t text_len() const { return text_len_; }
  int64_t text_dim() const { return text_dim_; }
  bool contains(const std::string& prompt) const { return index_.count(prompt) != 0; }
  // Row of a prompt; throws naming the prompt and the table file.
  int64_t row_of(const std::string& prompt) const;
  // [R, Lt, text_dim] bf16 CPU (a copy) for rows `idx`; thread-safe.
  torch::Tensor rows(const std::vector<int64_t>& idx) const;
  // Number of real (non-padding) tokens of a row.
  int64_t length(int64_t row) const;
  // H3 token tags [R, Lt] int64 for rows `idx` (1 text, 0 a vision token of the prompt, e.g. Picture 1's), from the
  // optional tensor "tags" [N, Lt] uint8; undefined when the table has none (every token is text).
  torch::Tensor tags(const std::vector<int64_t>& idx) const;
  const std::vector<std::string>& prompts() const { return prompts_; }
  const std::string& path() const { return path_; }

 private:
  TextTable() = default;
  void check_finite() const;  // every embedding finite, else an error naming the row and its prompt
  std::string path_;
  std::shared_ptr<SafetensorsFile> file_;  // keeps the mapping behind embeddings_ alive
  torch::Tensor embeddings_;               // [N, Lt, text_dim] bf16, view over the mapped file
  torch::Tensor tags_;                     // optional [N, Lt] uint8
  std::vector<int32_t> lengths_;
  std::vector<std::string> prompts_;
  std::unordered_map<std::string, int64_t> index_;
  int64_t text_len_ = 0, text_dim_ = 0;
};

}  // namespace vdt
