// Attention of query blocks over key ranges as ONE autograd node: each block of query rows attends to its own key
// ranges (a block-causal chunk: the prefix and the chunks before it; a packed segment: itself). Forward runs one fused
// SDPA call per block (the backend SDPA itself would pick: cuDNN, flash or memory-efficient on CUDA, the flash kernel
// on the CPU) and keeps each block's log-sum-exp; backward calls that backend's backward per block and adds dK / dV
// into the block's key ranges only. Per-block calls through autograd instead cost a zero-filled full-size gradient
// and a full-size add per block and per k / v (the slices' backward), which on the H3 causal step was ~0.3 s.
// The per-block autograd path (layout_attention's reference) stays; tests compare the two, forward and backward.
#pragma once
#include <torch/types.h>

#include <utility>
#include <vector>

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

}  // namespace vdt
