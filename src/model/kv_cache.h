// The keys and values a streamed chunk attends to besides itself (streaming generation, docs/causal.md "Generating
// with a trained LoRA"): per block one buffer of rows [B, capacity, N, Dh] for K and one for V, holding the kept
// segments in stream order (the prefix, then finished chunks). A pass over new rows (the chunk being made, or the
// prefix) writes its keys and values after the kept rows in every block and attends over [0, kept + new): one SDPA
// call on a contiguous range, no mask. A committing pass keeps its rows; dropping a segment moves the rows after it
// down, so the buffer stays contiguous and in order. Also per block the cross-attention's text keys and values (Wan).
// A pass with autograd (a trainer's rollout) writes nothing into the buffers: it attends to a KvHistory, the kept rows
// as they were when it began, so that a checkpointed block's recompute in backward sees what its forward saw.
// Not here: positions (the family's stream re-rotates the sink, model/kv_stream.h) or which chunks to keep.
#pragma once
#include <torch/types.h>

#include <memory>
#include <vector>

namespace vdt {

enum class AttentionKernel;  // model/attention.h
class KvCache;

// What a pass with autograd attends to besides its own rows: per block the kept keys and values at the pass's start
// (detached views of the buffers, copies when a window may move the rows before backward, or, for segments committed
// with their graph kept, those graph tensors). It is held by the pass's blocks, so a recompute reads the same rows.
struct KvHistory {
  std::vector<torch::Tensor> k, v;  // per block [B, kept, N, Dh]
  KvCache* commit_to = nullptr;     // a committing pass: its keys and values go to this cache too (KvCache::attend)
  // q, k, v [B, L, N, Dh] of the pass's rows in `block` -> [B, N, L, Dh]: q over the history's rows and these rows,
  // in the graph (one attention call over the concatenated keys and values).
  torch::Tensor attend(int64_t block, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       AttentionKernel kernel) const;
};

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
  // The history of a pass with autograd (after begin()): `copy` takes copies of the kept rows (a window that drops or
  // re-rotates rows before backward would change the views); a committing pass also writes its rows (detached) into
  // the buffers and keeps them in the graph for later passes (KvHistory::attend).
  std::shared_ptr<const KvHistory> history(bool copy);
  // A committing pass with autograd: block `block`'s keys and values [B, L, N, Dh] of the pass, kept in the graph (the
  // segment's rows for later histories) and written detached into the buffers (for passes without autograd).
  void keep_graph(int64_t block, const torch::Tensor& k, const torch::Tensor& v);
  bool keeps_graph() const;   // some kept segment holds graph tensors
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
  // [block][segment] keys and values kept in the graph (undefined: the buffer's rows), and this pass's
  std::vector<std::vector<torch::Tensor>> graph_k_, graph_v_;
  std::vector<torch::Tensor> pass_graph_k_, pass_graph_v_;
  std::vector<torch::Tensor> text_k_, text_v_;
  std::vector<Segment> segments_;
  int64_t capacity_ = 0, kept_ = 0;
  int64_t pass_rows_ = 0, pass_chunk_ = -1;
  bool pass_commit_ = false, pass_raw_ = false;
};

// What a block's attention takes from a stream: the cache and the block's index (cache null: no stream), and for a
// pass with autograd the history it attends to (then the pass reads no buffer and writes none but a commit's rows).
struct KvSlot {
  KvCache* cache = nullptr;
  int64_t block = 0;
  std::shared_ptr<const KvHistory> history;
  explicit operator bool() const { return cache != nullptr; }
};

}  // namespace vdt
