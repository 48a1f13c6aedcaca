// Host launchers of the SwiGLU kernels (swiglu_cuda.cu), called by swiglu.cpp only when VDT_WITH_CUDA_KERNELS is
// defined. h [rows, 2F] contiguous, float32 or bfloat16.
#pragma once
#include <ATen/core/Tensor.h>

namespace vdt::kernels::cuda {

// h [rows, 2F] -> y [rows, F] = silu(h[:, :F]) * h[:, F:] in h's dtype
at::Tensor swiglu_forward(const at::Tensor& h);
// dy [rows, F], h [rows, 2F] -> dh [rows, 2F] in h's dtype
at::Tensor swiglu_backward(const at::Tensor& dy, const at::Tensor& h);

}  // namespace vdt::kernels::cuda
