// Attention of query blocks over key ranges as ONE autograd node: each block of query rows attends to its own key
// ranges (a block-causal chunk: the prefix and the chunks before it; a packed segment: itself). Forward runs one fused
// SDPA call per block (the backend SDPA itself would pick: cuDNN, flash or memory-efficient on CUDA, the flash kernel
// on the CPU) and keeps each block's log-sum-exp; backward calls that backend's backward per block and adds dK / dV
// into the block's key ranges only. Per-block calls through autograd instead cost a zero-filled full-size gradient
// and a full-size add per block and per k / v (the slices' backward), which on the H3 causal step was ~0.3 s.
// The per-block autograd path (layout_attention's reference) stays; tests compare the two, forward and backward.
#pragma once
#include <torch/types.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "model/kept_ops.h"

namespace vdt {

// Query rows [begin, end) and the key ranges [first, second) they attend to (ascending, disjoint).
struct QueryBlock {
  int64_t begin = 0, end = 0;
  std::vector<std::pair<int64_t, int64_t>> keys;
};

// True when a fused SDPA backend (not the math fallback) takes q [B, N, Lq, Dh] / k, v [B, N, Lk, Dh] on their
// device and dtype, so ranged_attention can run.
bool ranged_attention_supported(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// q [B, N, Lq, Dh], k/v [B, N, Lk, Dh], blocks covering query rows 0..Lq in order -> [B, N, Lq, Dh] (the same strides
// as q). Throws unless ranged_attention_supported.
torch::Tensor ranged_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const std::vector<QueryBlock>& blocks);

// The blocks whose forward results a RangedAttentionKeep of `fraction` keeps: those with the most keys first (the
// prefix pattern's last chunks, whose forward costs the most), while their rows stay within fraction x the query
// rows. Indices into `blocks`, ascending.
std::vector<size_t> blocks_to_keep(const std::vector<QueryBlock>& blocks, double fraction);

// Query blocks' forward results kept from a block's forward to its recompute (block activation checkpointing's
// `--attn-keep`, installed on the thread with RangedAttentionKeepScope): while recording, each ranged_attention call
// keeps the output [B, N, len, Dh] and the backend's backward state (log-sum-exp, RNG state) of blocks_to_keep's
// blocks; after replay(), the same calls in the same order take them instead of running those blocks' forward again.
// The backward needs exactly those, so gradients do not change; the memory is the kept rows' output, fraction x
// L x D x 2 bytes (bf16) per block, from the forward until the recompute, on the device unless a stash holds the
// outputs elsewhere.
class RangedAttentionKeep {
 public:
  // Where a kept output waits: stash(o) takes o and hands back a function that gives it back (on o's device), called
  // once, at the replay. The training side sets it (distributed/activation_checkpoint.cpp, `--act-offload on`: pinned
  // host memory); empty: the outputs stay where they are.
  using Stash = std::function<std::function<torch::Tensor()>(const torch::Tensor&)>;
  explicit RangedAttentionKeep(double fraction, Stash stash = {});  // fraction in (0, 1]
  ~RangedAttentionKeep();
  void replay();            // the forward is done: later calls take what it kept, in its call order
  void check_done() const;  // throws unless every recorded call was replayed
  bool replaying() const { return replaying_; }
  std::function<torch::Tensor()> keep(const torch::Tensor& out) const;  // out through the stash (or held as it is)

  struct Call;  // one call's kept blocks (ranged_attention.cpp)
  Call& next_call(const std::vector<int64_t>& layout, const torch::Tensor& q, const std::vector<QueryBlock>& blocks);

 private:
  double fraction_;
  Stash stash_;
  bool replaying_ = false;
  size_t next_ = 0;
  std::vector<std::unique_ptr<Call>> calls_;
};

// Installs `keep` (nullptr: none) on this thread for the scope's life; the previous one comes back after.
class RangedAttentionKeepScope : ThreadSlotScope<RangedAttentionKeep> {
 public:
  explicit RangedAttentionKeepScope(RangedAttentionKeep* keep);
};

}  // namespace vdt
