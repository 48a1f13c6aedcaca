// Wan self-attention's q/k preparation as one autograd node: from the projections q_in, k_in [B, L, D] to
// q = rope(RMSNorm_D(q_in) * w_q), k = rope(RMSNorm_D(k_in) * w_k), each [B, L, N, Dh] contiguous. Wan normalises over
// the full width D = N * Dh (all heads together, docs/design.md §1), then RoPE rotates interleaved pairs (2j, 2j + 1)
// of each head by the 3-axis table (model/embeddings.h). The reference chain (ATen rms_norm, the weight, RoPE's casts,
// complex view and multiply) is ~10 kernels over [B, L, D] per tensor; the CUDA kernel (one block per token row:
// sum of squares, normalise, weight, rotate) runs it in one pass forward and one backward, with the norm weights'
// gradients as fixed per-block partial sums (the same kernels without the rotation: cross-attention's q / k norm,
// wan_rms_norm). Numerics: the reference's (statistics in float32, the normalised and the
// weighted value rounded to x's dtype, the rotation in float32 rounded once). Without the CUDA kernels (CPU, no nvcc)
// the same node runs in ATen ops with the same hand-written backward. Not here: H3's per-head norm (qk_norm_rope.h).
#pragma once
#include <torch/types.h>

#include <string>
#include <tuple>

namespace vdt::kernels {

// q_in, k_in [B, L, D] (same dtype), w_q, w_k [D], cos / sin [L, Dh/2] float32 (RopeTable), heads N with D = N * Dh
// -> (q, k) [B, L, N, Dh]. Runs the reference (wan_qk_norm_rope_reference) when the fused-kernel switch is off.
std::tuple<torch::Tensor, torch::Tensor> wan_qk_norm_rope(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                          const torch::Tensor& w_q, const torch::Tensor& w_k,
                                                          double eps, const torch::Tensor& cos,
                                                          const torch::Tensor& sin, int64_t heads);
// The fused node whatever the switch says (aten: the fallback even on CUDA; tests and `vdt bench kernels`).
std::tuple<torch::Tensor, torch::Tensor> fused_wan_qk_norm_rope(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                                const torch::Tensor& w_q, const torch::Tensor& w_k,
                                                                double eps, const torch::Tensor& cos,
                                                                const torch::Tensor& sin, int64_t heads, bool aten);
// The reference: the ops SelfAttention ran before (RMSNormImpl's rms_norm * weight, then apply_rope), through autograd.
std::tuple<torch::Tensor, torch::Tensor> wan_qk_norm_rope_reference(const torch::Tensor& q_in,
                                                                    const torch::Tensor& k_in, const torch::Tensor& w_q,
                                                                    const torch::Tensor& w_k, double eps,
                                                                    const torch::Tensor& cos, const torch::Tensor& sin,
                                                                    int64_t heads);
// RMSNormImpl (Wan's cross-attention q / k norm, H3's block norms), the same kernels without RoPE: x [..., D], w [D]
// -> RMSNorm_D(x) * w, x's shape. The fused node on CUDA with the switch on; elsewhere (CPU, switch off) the
// reference ops.
torch::Tensor wan_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);
// The fused node whatever the switch says (aten: its ATen fallback, also on CUDA; tests and `vdt bench kernels`).
torch::Tensor fused_wan_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps, bool aten);
// The reference: ATen's rms_norm without weight (rounded to x's dtype), then the weight multiply, through autograd.
torch::Tensor wan_rms_norm_reference(const torch::Tensor& x, const torch::Tensor& w, double eps);
// "cuda" or "aten": what the fused node runs for these operands.
std::string wan_qk_backend(const torch::Tensor& q_in, const torch::Tensor& w_q);

}  // namespace vdt::kernels
