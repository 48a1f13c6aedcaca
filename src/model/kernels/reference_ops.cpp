// Reference forms, verbatim from the blocks before the fusion (model/block.cpp, model/h3/h3_block.cpp).
#include "model/kernels/reference_ops.h"

#include <torch/torch.h>

namespace vdt::kernels {

torch::Tensor reference_modulated_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                       double eps) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = shift.size(1);
  auto h = torch::layer_norm(x, {D}, {}, {}, eps).view({B, G, L / G, D});  // [B, L, D] -> [B, G, L/G, D]
  // Modulation in the dtype of shift/scale (float32: the official Wan's fp32 island), result in x's dtype.
  // (h is promoted inside the kernel: no separate float32 copy of it)
  return torch::addcmul(shift, h, 1 + scale).to(x.scalar_type()).view({B, L, D});  // -> [B, L, D]
}

torch::Tensor reference_gated_add(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = gate.size(1);
  return x + (y.view({B, G, L / G, D}) * gate).to(x.scalar_type()).view({B, L, D});  // y promoted in the kernel
}

torch::Tensor reference_h3_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                    const torch::Tensor& rows) {
  return (x * (1.0 + scale.index_select(0, rows)) + shift.index_select(0, rows)).to(x.scalar_type());
}

torch::Tensor reference_h3_gate(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
                                const torch::Tensor& rows) {
  return (x + gate.index_select(0, rows) * y).to(x.scalar_type());
}

}  // namespace vdt::kernels
