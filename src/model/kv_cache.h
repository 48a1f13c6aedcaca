// The keys and values a streamed chunk attends to besides itself (streaming generation, docs/causal.md "Generating
// with a trained LoRA"): per block one buffer of rows [B, capacity, N, Dh] for K and one for V, holding the kept
// segments in stream order (the prefix, then finished chunks). A pass over new rows (the chunk being made, or the
// prefix) writes its keys and values after the kept rows in every block and attends over [0, kept + new): one SDPA
// call on a contiguous range, no mask. A committing pass keeps its rows; dropping a segment moves the rows after it
// down, so the buffer stays contiguous and in order. Also per block the cross-attention's text keys and values (Wan).
// Not here: positions (the family's stream re-rotates the sink, model/kv_stream.h) or which chunks to keep.
#pragma once
#include <torch/types.h>

#include <vector>

namespace vdt {

enum class AttentionKernel;  // model/attention.h

class KvCache {
 public:
  struct Segment {
    int64_t chunk = -1;  // -1: the prefix
    int64_t begin = 0, end = 0;
  };
  // Buffers for `blocks` blocks of `batch` streams of up to `capacity` rows (kept rows and one pass's rows together).
  KvCache(int64_t blocks, int64_t batch, int64_t capacity, int64_t heads, int64_t head_dim,
          torch::TensorOptions options);

  // One pass over `rows` new rows of segment `chunk`; with `commit` they are kept at end(). `keep_raw`: the pass's
  // keys before the rotary embedding are kept too (a sink segment, re-rotated when the window moves).
  void begin(int64_t rows, int64_t chunk, bool commit, bool keep_raw = false);
  // q, k, v [B, L, N, Dh] of the pass's rows in `block` -> [B, N, L, Dh]: q over the kept rows and these rows (keys
  // and values written into the buffer). raw_k [B, L, N, Dh]: the keys before rotation, when wants_raw_keys().
  torch::Tensor attend(int64_t block, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       AttentionKernel kernel, const torch::Tensor& raw_k = {});
  // Block `block`'s rows of this pass in the buffers, (keys, values) [B, L, N, Dh] contiguous views: a pass may write
  // its keys and values there itself and hand these views to attend(), which then copies nothing.
  std::pair<torch::Tensor, torch::Tensor> pass_rows(int64_t block);
  bool wants_raw_keys() const { return pass_raw_; }
  bool in_pass() const { return pass_rows_ > 0; }
  void end();                 // every block saw the pass: a committing pass's rows become a segment
  void end_without_commit();  // a pass that failed: nothing is kept

  // Drops segment i: the rows after it move down (once per dropped chunk, not per step).
  void drop(size_t i);
  const std::vector<Segment>& segments() const { return segments_; }
  // Block `block`'s keys of segment i, [B, len, N, Dh] (a view: writing it re-rotates them).
  torch::Tensor keys(int64_t block, size_t i);
  // The keys before rotation kept for segment i (empty unless its pass kept them).
  const torch::Tensor& raw_keys(int64_t block, size_t i) const;

  // Cross-attention's text keys (normed) and values of block `block`, computed once per stream (Wan).
  void set_text(int64_t block, torch::Tensor k, torch::Tensor v);
  bool has_text() const { return !text_k_.empty() && text_k_[0].defined(); }
  const torch::Tensor& text_k(int64_t block) const { return text_k_.at(static_cast<size_t>(block)); }
  const torch::Tensor& text_v(int64_t block) const { return text_v_.at(static_cast<size_t>(block)); }

  int64_t kept_rows() const { return kept_; }
  int64_t capacity() const { return capacity_; }
  int64_t blocks() const { return static_cast<int64_t>(k_.size()); }
  int64_t bytes() const;  // every buffer the cache holds on its device

 private:
  std::vector<torch::Tensor> k_, v_;             // [B, capacity, N, Dh] per block
  std::vector<std::vector<torch::Tensor>> raw_;  // [block][segment] keys before rotation (or undefined)
  std::vector<torch::Tensor> pass_raw_k_;        // this pass's, per block
  std::vector<torch::Tensor> text_k_, text_v_;
  std::vector<Segment> segments_;
  int64_t capacity_ = 0, kept_ = 0;
  int64_t pass_rows_ = 0, pass_chunk_ = -1;
  bool pass_commit_ = false, pass_raw_ = false;
};

// What a block's attention takes from a stream: the cache and the block's index (cache null: no stream).
struct KvSlot {
  KvCache* cache = nullptr;
  int64_t block = 0;
  explicit operator bool() const { return cache != nullptr; }
};

}  // namespace vdt
