// Rows gathered by index with a faster backward on CUDA, against its ATen reference (index_select): the per-cell text
// of Wan's cross-attention (one text row per video frame, many frames sharing a row) expands the text keys and values
// [R, Lt, D] to the frames [N, Lt, D]. Forward is index_select; its ATen backward, index_add_ with bfloat16 atomics,
// serialises on the adds (0.27 ms per call at the 5B geometry on an H200, 16 ms of the SFT step). Here the backward is
// one kernel: each output element sums its ids' gradients in float32, in id order (deterministic), 0.075 ms
// (`vdt bench kernels`). Without the CUDA kernels (CPU, no nvcc) or with the fused-kernel switch off it runs the
// ATen reference.
#pragma once
#include <torch/types.h>

namespace vdt::kernels {

// rows [R, ...], ids [N] int64 in [0, R) -> rows[ids] [N, ...] (the node on CUDA, else index_select).
torch::Tensor gather_rows(const torch::Tensor& rows, const torch::Tensor& ids);
// The node on any device (aten: its backward as ATen's index_add_; tests and `vdt bench kernels`).
torch::Tensor fused_gather_rows(const torch::Tensor& rows, const torch::Tensor& ids, bool aten);

}  // namespace vdt::kernels
