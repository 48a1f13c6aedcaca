// Host launcher of the column-sum kernels (bias_grad_cuda.cu), called by bias_grad.cpp only when VDT_WITH_CUDA_KERNELS
// is defined. g on a CUDA device, float32 or bfloat16.
#pragma once
#include <ATen/core/Tensor.h>

namespace vdt::kernels::cuda {

// g [N, C] -> [C] in g's dtype: out[c] = sum over n of g[n, c], in float32 (deterministic on a given device).
at::Tensor column_sum(const at::Tensor& g);
// partial [S, C] float32 (a first pass's per-slice column sums, done elsewhere: the FP8 column quantization) -> [C] in
// `dtype` (float32 or bfloat16): column_sum's second pass, the S rows added in order.
at::Tensor column_sum_finish(const at::Tensor& partial, at::ScalarType dtype);

}  // namespace vdt::kernels::cuda
