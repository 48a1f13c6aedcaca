// The SwiGLU node (swiglu.h): dispatch, the autograd Function and its ATen form.
#include "model/kernels/swiglu.h"

#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#ifdef VDT_WITH_CUDA_KERNELS
#include "model/kernels/swiglu_cuda.h"
#endif

namespace vdt::kernels {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ATen form of the backward: dy [rows, F], h [rows, 2F] -> dh [rows, 2F], rounding as autograd does.
Tensor backward_aten(const Tensor& dy, const Tensor& h) {
  const auto parts = h.chunk(2, -1);
  const auto& a = parts[0];
  const auto& b = parts[1];
  const auto da = torch::silu_backward(dy * b, a);  // d silu(gate) = dy * up, rounded, then silu's derivative
  const auto db = dy * torch::silu(a);
  return torch::cat({da, db}, -1);
}

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& h, bool cuda) {
    ctx->save_for_backward({h});
    ctx->saved_data["cuda"] = cuda;
#ifdef VDT_WITH_CUDA_KERNELS
    if (cuda) return {cuda::swiglu_forward(h)};
#endif
    const auto parts = h.chunk(2, -1);
    return {torch::silu(parts[0]) * parts[1]};  // autograd is off: no graph
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto h = ctx->get_saved_variables()[0];
    const auto dy = grads[0].defined() ? grads[0] : torch::zeros({h.size(0), h.size(1) / 2}, h.options());
#ifdef VDT_WITH_CUDA_KERNELS
    if (ctx->saved_data["cuda"].toBool()) return {cuda::swiglu_backward(dy, h), Tensor()};
#endif
    return {backward_aten(dy.to(h.scalar_type()), h), Tensor()};
  }
};

}  // namespace

Tensor swiglu_reference(const Tensor& h) {
  const auto parts = h.chunk(2, -1);  // [..., 2F] -> gate [..., F], up [..., F]
  return torch::silu(parts[0]) * parts[1];
}

Tensor fused_swiglu(const Tensor& h, bool aten) {
  TORCH_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, "swiglu: expected h [..., 2F], got ", h.sizes());
  auto sizes = h.sizes().vec();
  sizes.back() /= 2;
  const auto h2 = h.reshape({-1, h.size(-1)});  // [..., 2F] -> [rows, 2F]
  return SwigluFn::apply(h2, !aten && cuda_kernels_take(h))[0].view(sizes);
}

Tensor swiglu(const Tensor& h) {
  if (!fused_kernels_on() || !cuda_kernels_take(h)) return swiglu_reference(h);
  return fused_swiglu(h, /*aten=*/false);
}

}  // namespace vdt::kernels
