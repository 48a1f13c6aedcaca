// Host launchers of the q/k RMSNorm + RoPE kernels (qk_norm_rope_cuda.cu), called by qk_norm_rope.cpp only when
// VDT_WITH_CUDA_KERNELS is defined. qkv [S, N, 3, Dh] bfloat16 or float32 with Dh contiguous, w_q / w_k [Dh] in its
// dtype, cos / sin [S, 6R] float32 contiguous.
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

namespace vdt::kernels::cuda {

// -> (q [S, N, Dh], k [S, N, Dh] in qkv's dtype, rstd [2, S, N] float32); k is written into k_out when given
// ([S, N, Dh] contiguous in qkv's dtype: a stream's KV cache rows) and returned as it.
std::tuple<at::Tensor, at::Tensor, at::Tensor> qk_norm_rope_forward(const at::Tensor& qkv, const at::Tensor& w_q,
                                                                    const at::Tensor& w_k, double eps,
                                                                    const at::Tensor& cos, const at::Tensor& sin,
                                                                    const at::Tensor& k_out = at::Tensor());
// Writes dq_in, dk_in into dqkv[:, :, 0] and dqkv[:, :, 1] (dqkv [S, N, 3, Dh] contiguous, qkv's dtype) from the
// gradients of q and k ([S, N, Dh] contiguous, qkv's dtype).
void qk_norm_rope_backward(const at::Tensor& gq, const at::Tensor& gk, const at::Tensor& qkv, const at::Tensor& w_q,
                           const at::Tensor& w_k, const at::Tensor& rstd, const at::Tensor& cos, const at::Tensor& sin,
                           at::Tensor& dqkv);

}  // namespace vdt::kernels::cuda
