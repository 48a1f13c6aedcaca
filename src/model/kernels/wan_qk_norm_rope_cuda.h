// Host launchers of the Wan q/k RMSNorm (+ RoPE) kernels (wan_qk_norm_rope_cuda.cu), called by wan_qk_norm_rope.cpp
// only when VDT_WITH_CUDA_KERNELS is defined. q_in, k_in [B, L, D] bfloat16 or float32, w_q / w_k [D] in their dtype,
// cos / sin [L, Dh/2] float32, D = heads * Dh.
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

namespace vdt::kernels::cuda {

// The widest row the kernels take (the backward keeps one float per column of the weight-gradient partials in shared
// memory: 32 KiB of the 48 KiB a block gets without opting in).
constexpr int64_t kWanQkMaxWidth = 8192;

// -> (q [B, L, N, Dh], k [B, L, N, Dh] in the inputs' dtype, rstd [2, B * L] float32)
std::tuple<at::Tensor, at::Tensor, at::Tensor> wan_qk_norm_rope_forward(const at::Tensor& q_in, const at::Tensor& k_in,
                                                                        const at::Tensor& w_q, const at::Tensor& w_k,
                                                                        double eps, const at::Tensor& cos,
                                                                        const at::Tensor& sin, int64_t heads);
// From the gradients of q and k ([B, L, N, Dh], the inputs' dtype) -> (dq_in, dk_in [B, L, D] in the inputs' dtype,
// dw [2, D] float32 (rows: w_q, w_k) when want_w, else undefined).
std::tuple<at::Tensor, at::Tensor, at::Tensor> wan_qk_norm_rope_backward(const at::Tensor& gq, const at::Tensor& gk,
                                                                         const at::Tensor& q_in, const at::Tensor& k_in,
                                                                         const at::Tensor& w_q, const at::Tensor& w_k,
                                                                         const at::Tensor& rstd, const at::Tensor& cos,
                                                                         const at::Tensor& sin, bool want_w);

// The same kernels on one tensor without RoPE (cross-attention's q and k): x [B, L, D], w [D] in x's dtype ->
// (y = RMSNorm_D(x) * w [B, L, D] in x's dtype, rstd [1, B * L] float32).
std::tuple<at::Tensor, at::Tensor> wan_rms_norm_forward(const at::Tensor& x, const at::Tensor& w, double eps);
// From dy [B, L, D] (x's dtype) -> (dx [B, L, D] in x's dtype, dw [D] float32 when want_w, else undefined).
std::tuple<at::Tensor, at::Tensor> wan_rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                         const at::Tensor& rstd, bool want_w);

}  // namespace vdt::kernels::cuda
