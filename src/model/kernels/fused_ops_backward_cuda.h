// Host launchers of the backward CUDA kernels of the fused ops (fused_ops_backward_cuda.cu; the forwards:
// fused_ops_cuda.h), called by fused_ops.cpp only when VDT_WITH_CUDA_KERNELS is defined. No CUDA header here. Shapes
// and dtypes as in fused_ops_cuda.h.
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

namespace vdt::kernels::cuda {

// The backward of the LayerNorm + modulate, one pass over go and x: dx [B, L, D] in x's dtype, plus res when defined
// (the residual stream's gradient of the same x, added in float32 before the rounding), and with want_sums the group
// sums over each group's tokens (sum go * h, sum go) [B, G, 1, D] float32, h = LN(x) rounded to x's dtype; the second
// only with want_plain. go, x, res [B, L, D]; mean/rstd [B*L]; scale [B, G, 1, D].
std::tuple<at::Tensor, at::Tensor, at::Tensor> modulated_norm_backward(const at::Tensor& go, const at::Tensor& x,
                                                                       const at::Tensor& mean, const at::Tensor& rstd,
                                                                       const at::Tensor& scale, const at::Tensor& res,
                                                                       bool want_sums, bool want_plain);
// The group sums alone (x wants no gradient).
std::tuple<at::Tensor, at::Tensor> modulated_norm_sums(const at::Tensor& go, const at::Tensor& x,
                                                       const at::Tensor& mean, const at::Tensor& rstd, int64_t G,
                                                       bool want_plain);
// The backward of an affine LayerNorm over the last dim (norm3), one pass over go and x: dx in x's dtype (+ res when
// defined, as above) and the sums over every row of go * n (the weight's gradient, with want_w) and go (the bias's,
// with want_b), [D] float32. mean/rstd as at::native_layer_norm returns them; weight, bias [D] (bias read only by the
// fallback for rows too wide for the kernel: ATen's backward).
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& go, const at::Tensor& x,
                                                                   const at::Tensor& mean, const at::Tensor& rstd,
                                                                   const at::Tensor& weight, const at::Tensor& bias,
                                                                   const at::Tensor& res, bool want_w, bool want_b);
// The backward of gated_add_forward, one pass over go and y: (dy = (go * gate) in y_dtype when want_y, sum go * y over
// each group's tokens [B, G, 1, D] float32 when want_gate; y is read, and must be defined, only then; gate always)
std::tuple<at::Tensor, at::Tensor> gated_add_backward(const at::Tensor& go, const at::Tensor& y, const at::Tensor& gate,
                                                      at::ScalarType y_dtype, bool want_y, bool want_gate);

// H3: (go * m[rows]).to(dtype), m = (1 + mod) rounded to mod's dtype when one_plus, else mod
at::Tensor rows_scale(const at::Tensor& go, const at::Tensor& mod, const at::Tensor& rows, bool one_plus,
                      at::ScalarType dtype);
// Sums over the tokens of each row r: (sum go * other, sum go) [R, D] float32; the second only when want_plain
std::tuple<at::Tensor, at::Tensor> row_sums(const at::Tensor& go, const at::Tensor& other, const at::Tensor& rows,
                                            int64_t R, bool want_plain);

}  // namespace vdt::kernels::cuda
