// Host launcher of the row-gather backward kernel (row_gather_cuda.cu), called by row_gather.cpp only when
// VDT_WITH_CUDA_KERNELS is defined. Tensors on one CUDA device, float32 or bfloat16.
#pragma once
#include <ATen/core/Tensor.h>

namespace vdt::kernels::cuda {

// g [N, K] (contiguous), ids [N] int64 in [0, R) -> [R, K] in g's dtype: out[r] = sum over n with ids[n] == r of g[n]
// (float32, in n order; zero for a row no id names).
at::Tensor gather_rows_backward(const at::Tensor& g, const at::Tensor& ids, int64_t R);

}  // namespace vdt::kernels::cuda
