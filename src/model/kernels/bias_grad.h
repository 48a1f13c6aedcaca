// The bias gradient of a linear: the sum over the rows of its output gradient, with a faster CUDA kernel beside the
// ATen reference (g.sum(0)). ATen's column reduction of a bfloat16 [8190, 3072] gradient runs at ~1.7 TB/s on an H200
// (30 us a call, 210 calls and 6.2 ms of the 5B SFT step); here two deterministic passes (bias_grad_cuda.cu): per tile
// of columns and slice of rows, float32 sums of 16-byte packs into one partial row, then the partial rows in order.
// Without the CUDA kernels (CPU, no nvcc) or with the fused-kernel switch off it runs the reference.
#pragma once
#include <torch/types.h>

namespace vdt::kernels {

// g [N, C] -> [C] in g's dtype: the sum over N (float32 accumulation). The kernel on CUDA, else g.sum(0).
torch::Tensor bias_grad(const torch::Tensor& g);
// Either path on any device (aten: g.sum(0); the tests).
torch::Tensor bias_grad(const torch::Tensor& g, bool aten);

}  // namespace vdt::kernels
