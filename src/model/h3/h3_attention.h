// H3 attention (h3_spec §1.3 step 4, §1.7) under its checkpoint names: fused `qkv_proj` with rows per head
// [q | k | v], per-head RMSNorm `q_norm`/`k_norm` before RoPE, partial rotate-half RoPE over the first 6*rope_len
// head channels, attention over packed segments (cu_seqlens: no row sees another segment), `out_proj`.
// Also the 3-axis RoPE table from float positions. Not here: masks beyond segments (causal chunks come later).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <vector>

#include "model/attention.h"

namespace vdt {

// cos/sin of the rotary angles, [S, 6R] float32: per row [t(R) | h(R) | w(R)] twice.
struct H3RopeTable {
  torch::Tensor cos, sin;
};
// positions [S, 3] (any float dtype; cast to float32 as the reference does) -> table. inv_freq is recomputed as
// 1/10000^(i/R) in float32 (the checkpoint's stored rope.inv_freq is never read by the reference).
H3RopeTable h3_rope_table(const torch::Tensor& positions, int64_t rope_len);
// x [S, N, Dh] -> [S, N, Dh]: channels [0, 6R) rotated as rotate-half (d pairs with d + 3R), the rest unchanged.
torch::Tensor h3_apply_rope(const torch::Tensor& x, const H3RopeTable& rope);

// Attention within segments: q/k/v [S, N, Dh], segment bounds {0, b1, ..., S} -> [S, N, Dh]. Empty segments are
// skipped. One kernel call per segment (the reference's varlen loop), sdpa or the eager softmax.
torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const std::vector<int64_t>& bounds, AttentionKernel kernel);

class H3AttentionImpl : public torch::nn::Module {
 public:
  H3AttentionImpl(int64_t dim, int64_t heads, int64_t head_dim, double qk_eps);
  // x [S, D], rope table or nullptr (token refiner), segment bounds -> [S, D]
  torch::Tensor forward(const torch::Tensor& x, const H3RopeTable* rope, const std::vector<int64_t>& bounds);
  torch::nn::Linear qkv_proj{nullptr}, out_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  AttentionKernel kernel = AttentionKernel::sdpa;

 private:
  int64_t heads_, head_dim_;
};
TORCH_MODULE(H3Attention);

}  // namespace vdt
