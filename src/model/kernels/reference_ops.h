// The reference (autograd) forms of the elementwise chains that fused_ops.h fuses: the slow, obvious path kept beside
// the fast one (tests compare the two; --fused-kernels off runs it). Each is the model code as it was
// before the fusion, op by op, so autograd derives its backward. Not here: any hand-written gradient.
#pragma once
#include <torch/types.h>

namespace vdt::kernels {

// LayerNorm (no affine) over D, then * (1 + scale) + shift per timestep group, in shift/scale's dtype (float32: the
// official Wan's fp32 island), result in x's dtype. x [B, L, D], shift/scale [B, G, 1, D] -> [B, L, D]
torch::Tensor reference_modulated_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                       double eps);
// x + (y * gate).to(x's dtype) per timestep group: x, y [B, L, D], gate [B, G, 1, D] -> [B, L, D]
torch::Tensor reference_gated_add(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);
// (x * (1 + scale[rows]) + shift[rows]).to(x's dtype): x [S, D], shift/scale [R, D], rows [S] int64 -> [S, D]
torch::Tensor reference_h3_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                    const torch::Tensor& rows);
// (x + gate[rows] * y).to(x's dtype): x, y [S, D], gate [R, D], rows [S] int64 -> [S, D]
torch::Tensor reference_h3_gate(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
                                const torch::Tensor& rows);

}  // namespace vdt::kernels
