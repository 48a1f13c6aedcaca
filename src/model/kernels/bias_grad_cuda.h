// Host launcher of the column-sum kernels (bias_grad_cuda.cu), called by bias_grad.cpp only when VDT_WITH_CUDA_KERNELS
// is defined. g on a CUDA device, float32 or bfloat16.
#pragma once
#include <ATen/core/Tensor.h>

namespace vdt::kernels::cuda {

// g [N, C] -> [C] in g's dtype: out[c] = sum over n of g[n, c], in float32 (deterministic on a given device).
at::Tensor column_sum(const at::Tensor& g);

}  // namespace vdt::kernels::cuda
