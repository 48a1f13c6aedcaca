// Host launchers of the forward CUDA kernels (fused_ops_cuda.cu; the backwards: fused_ops_backward_cuda.h), called by
// fused_ops.cpp only when VDT_WITH_CUDA_KERNELS is defined. No CUDA header here, so the C++ side compiles without nvcc.
// Every tensor is on one CUDA device; x/y/go are float32 or bfloat16, modulation tensors float32 or x's dtype
// (fused_ops.cpp checks before it calls). "Rows" of the modulation: Wan groups (token row i of [B, L, D] uses row (i /
// L) * G + (i % L) / (L / G) of [B*G, D]) or an H3 index tensor (row rows[i] of [R, D]).
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

namespace vdt::kernels::cuda {

// True when the kernels have an image for this device (checked once per device).
bool device_supported(int device_index);

// Wan LayerNorm + modulate: -> (out [B, L, D] x's dtype, mean [B*L] f32, rstd [B*L] f32)
std::tuple<at::Tensor, at::Tensor, at::Tensor> modulated_norm_forward(const at::Tensor& x, const at::Tensor& shift,
                                                                      const at::Tensor& scale, double eps);
// Wan gate + residual: x + (y * gate).to(x) with gate [B, G, 1, D]
at::Tensor gated_add_forward(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate);

// H3 modulate, x [S, D], shift/scale [R, D], rows [S]
at::Tensor h3_modulate_forward(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                               const at::Tensor& rows);
// H3 gate + residual
at::Tensor h3_gate_forward(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y, const at::Tensor& rows);

}  // namespace vdt::kernels::cuda
