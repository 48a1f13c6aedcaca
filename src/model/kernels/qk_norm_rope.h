// H3 attention's q/k preparation as one autograd node: from the fused projection qkv [S, N, 3, Dh] (rows per head
// [q | k | v]) to q = rope(RMSNorm(q_in) * w_q), k = rope(RMSNorm(k_in) * w_k) and v, each [S, N, Dh] contiguous.
// The reference chain (unbind, ATen rms_norm, weight, RoPE's cat / mul / add) is ~12 kernels and ~0.5 s of the
// 33B causal step; here the CUDA kernel (one warp per head row: sum of squares, normalise, weight, rotate) runs it in
// one pass forward and one backward, and backward writes dqkv [S, N, 3, Dh] in one tensor. Numerics: the reference's
// roundings (normalised value, weighted value, each RoPE product and the sum rounded to x's dtype), statistics in
// float32. Without the CUDA kernels (CPU, no nvcc) the same node runs in ATen ops with the same hand-written backward.
#pragma once
#include <torch/types.h>

#include <tuple>

namespace vdt::kernels {

// H3's RoPE op by op: x [S, N, Dh], cos / sin [S, 1, 6R] in x's dtype -> [S, N, Dh], channels [0, 6R) rotated as
// rotate-half (d pairs with d + 3R), the rest unchanged.
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// qkv [S, N, 3, Dh] (any strides with Dh contiguous), w_q / w_k [Dh] in qkv's dtype, cos / sin [S, 6R] float32
// (h3_rope_table) -> (q, k, v) [S, N, Dh]. Runs the reference ops (h3_qk_norm_rope_reference) when the fused-kernel
// switch is off.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> h3_qk_norm_rope(const torch::Tensor& qkv,
                                                                        const torch::Tensor& w_q,
                                                                        const torch::Tensor& w_k, double eps,
                                                                        const torch::Tensor& cos,
                                                                        const torch::Tensor& sin);
// A stream's pass (no autograd): k and v written into k_out / v_out [S, N, Dh] (contiguous rows of the KV cache), q
// returned [S, N, Dh]. The numbers of h3_qk_norm_rope: on CUDA with the fused kernels its kernel writes k there itself
// and v is copied once from qkv; otherwise h3_qk_norm_rope's outputs are copied in (the reference).
torch::Tensor h3_qk_norm_rope_into(const torch::Tensor& qkv, const torch::Tensor& w_q, const torch::Tensor& w_k,
                                   double eps, const torch::Tensor& cos, const torch::Tensor& sin,
                                   const torch::Tensor& k_out, const torch::Tensor& v_out);
// The fused node whatever the switch says (aten: the fallback even on CUDA; tests and `vdt bench kernels`).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> fused_h3_qk_norm_rope(const torch::Tensor& qkv,
                                                                              const torch::Tensor& w_q,
                                                                              const torch::Tensor& w_k, double eps,
                                                                              const torch::Tensor& cos,
                                                                              const torch::Tensor& sin, bool aten);
// The reference: the ops H3Attention ran before, through autograd.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> h3_qk_norm_rope_reference(const torch::Tensor& qkv,
                                                                                  const torch::Tensor& w_q,
                                                                                  const torch::Tensor& w_k, double eps,
                                                                                  const torch::Tensor& cos,
                                                                                  const torch::Tensor& sin);

}  // namespace vdt::kernels
