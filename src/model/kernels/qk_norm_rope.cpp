// The q/k RMSNorm + RoPE node (qk_norm_rope.h): dispatch, the autograd Function and its ATen fallback.
// Backward per part p in {q, k}, rows of Dh (float32): gy = rope^T(g) (the rotation's transpose), gn = gy * w,
// nf = x * rstd, dx = rstd * (gn - nf * mean(gn * nf)); dw = sum over rows of gy * n (n = nf rounded, as forward).
#include "model/kernels/qk_norm_rope.h"

#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#ifdef VDT_WITH_CUDA_KERNELS
#include "model/kernels/fused_ops_cuda.h"
#include "model/kernels/qk_norm_rope_cuda.h"
#endif

namespace vdt::kernels {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Triple = std::tuple<Tensor, Tensor, Tensor>;

// The transpose of rotate (its backward): g [S, N, Dh], cos / sin [S, 1, 6R] -> g cos + rot^T(g sin) on the rotated
// channels, where rot^T(z) = [z2 | -z1]; exact for any tables (for H3's, whose halves repeat, it is rotate(g, cos,
// -sin)).
Tensor rotate_transpose(const Tensor& g, const Tensor& cos, const Tensor& sin) {
  const int64_t rot = cos.size(-1);
  auto g_rot = g.narrow(-1, 0, rot), g_pass = g.narrow(-1, rot, g.size(-1) - rot);
  auto z = (g_rot * sin).chunk(2, -1);
  return torch::cat({g_rot * cos + torch::cat({z[1], -z[0]}, -1), g_pass}, -1);
}

Tensor norm_weight(const Tensor& x, const Tensor& w, double eps) {
  return at::rms_norm(x, {x.size(-1)}, std::nullopt, eps) * w;  // as RMSNormImpl: cast before the weight multiply
}

bool use_cuda(const Tensor& qkv, const Tensor& w_q, const Tensor& w_k, bool aten) {
#ifdef VDT_WITH_CUDA_KERNELS
  const auto dt = qkv.scalar_type();
  return !aten && qkv.is_cuda() && (dt == torch::kBFloat16 || dt == torch::kFloat32) && w_q.scalar_type() == dt &&
         w_k.scalar_type() == dt && qkv.stride(3) == 1 && qkv.size(3) <= 256 &&
         cuda::device_supported(qkv.get_device());
#else
  (void)qkv, (void)w_q, (void)w_k, (void)aten;
  return false;
#endif
}

struct QkNormRopeFn : torch::autograd::Function<QkNormRopeFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& qkv, const Tensor& w_q, const Tensor& w_k,
                               double eps, const Tensor& cos, const Tensor& sin, bool cuda) {
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["cuda"] = cuda;
    if (cuda) {
#ifdef VDT_WITH_CUDA_KERNELS
      auto [q, k, rstd] = cuda::qk_norm_rope_forward(qkv, w_q, w_k, eps, cos, sin);
      ctx->save_for_backward({qkv, w_q, w_k, cos, sin, rstd});
      return {q, k, qkv.select(2, 2).contiguous()};
#endif
    }
    ctx->save_for_backward({qkv, w_q, w_k, cos, sin, Tensor()});
    auto [q, k, v] = h3_qk_norm_rope_reference(qkv, w_q, w_k, eps, cos, sin);  // autograd is off here: no graph
    return {q.contiguous(), k.contiguous(), v.contiguous()};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &qkv = saved[0], &w_q = saved[1], &w_k = saved[2], &cos = saved[3], &sin = saved[4];
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool want_w = ctx->needs_input_grad(1) || ctx->needs_input_grad(2);
    auto grad = [&](int i) { return grads[i].defined() ? grads[i] : torch::zeros_like(qkv.select(2, i)); };
    Tensor dqkv, dw[2];
    if (ctx->saved_data["cuda"].toBool() && ctx->needs_input_grad(0)) {
#ifdef VDT_WITH_CUDA_KERNELS
      dqkv = torch::empty(qkv.sizes(), qkv.options());  // [S, N, 3, Dh] contiguous
      cuda::qk_norm_rope_backward(grad(0).to(qkv.scalar_type()), grad(1).to(qkv.scalar_type()), qkv, w_q, w_k, saved[5],
                                  cos, sin, dqkv);
      dqkv.select(2, 2).copy_(grad(2));
#endif
    }
    if (!dqkv.defined() || want_w) {
      // the tables as forward used them (rounded to qkv's dtype), [S, 6R] -> [S, 1, 6R] float32
      const auto c = cos.to(qkv.scalar_type()).to(torch::kFloat32).unsqueeze(1);
      const auto s = sin.to(qkv.scalar_type()).to(torch::kFloat32).unsqueeze(1);
      std::vector<Tensor> parts;
      for (int p = 0; p < 2; ++p) {
        const auto& w = p == 0 ? w_q : w_k;
        const auto x = qkv.select(2, p).to(torch::kFloat32);                        // [S, N, Dh]
        const auto rstd = torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);  // [S, N, 1]
        const auto nf = x * rstd;
        const auto gy = rotate_transpose(grad(p).to(torch::kFloat32), c, s);
        if (want_w)
          dw[p] =
              (gy * nf.to(qkv.scalar_type()).to(torch::kFloat32)).sum(std::vector<int64_t>{0, 1}).to(w.scalar_type());
        const auto gn = gy * w.to(torch::kFloat32);
        parts.push_back(rstd * (gn - nf * (gn * nf).mean(-1, /*keepdim=*/true)));
      }
      if (!dqkv.defined()) {
        parts.push_back(grad(2).to(torch::kFloat32));
        dqkv = torch::stack(parts, 2).to(qkv.scalar_type());  // 3 x [S, N, Dh] -> [S, N, 3, Dh]
      }
    }
    return {ctx->needs_input_grad(0) ? dqkv : Tensor(),
            ctx->needs_input_grad(1) ? dw[0] : Tensor(),
            ctx->needs_input_grad(2) ? dw[1] : Tensor(),
            Tensor(),
            Tensor(),
            Tensor(),
            Tensor()};
  }
};

void check_shapes(const Tensor& qkv, const Tensor& w_q, const Tensor& w_k, const Tensor& cos, const Tensor& sin) {
  TORCH_CHECK(qkv.dim() == 4 && qkv.size(2) == 3, "h3_qk_norm_rope: expected qkv [S, N, 3, Dh], got ", qkv.sizes());
  const int64_t S = qkv.size(0), Dh = qkv.size(3);
  TORCH_CHECK(w_q.dim() == 1 && w_q.size(0) == Dh && w_k.sizes() == w_q.sizes(), "h3_qk_norm_rope: expected w_q, w_k [",
              Dh, "], got ", w_q.sizes(), " and ", w_k.sizes());
  TORCH_CHECK(
      cos.dim() == 2 && cos.size(0) == S && cos.size(1) % 2 == 0 && cos.size(1) <= Dh && sin.sizes() == cos.sizes(),
      "h3_qk_norm_rope: expected cos, sin [S=", S, ", 6R <= ", Dh, "], got ", cos.sizes(), " and ", sin.sizes());
}

}  // namespace

Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t rot = cos.size(-1);
  auto x_rot = x.narrow(-1, 0, rot), x_pass = x.narrow(-1, rot, x.size(-1) - rot);
  auto halves = x_rot.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);  // rotate-half: d pairs with d + 3R
  return torch::cat({x_rot * cos + rotated * sin, x_pass}, -1);
}

Triple h3_qk_norm_rope_reference(const Tensor& qkv, const Tensor& w_q, const Tensor& w_k, double eps, const Tensor& cos,
                                 const Tensor& sin) {
  check_shapes(qkv, w_q, w_k, cos, sin);
  auto parts = qkv.unbind(2);                                                                   // 3 x [S, N, Dh]
  auto c = cos.to(qkv.scalar_type()).unsqueeze(1), s = sin.to(qkv.scalar_type()).unsqueeze(1);  // [S, 1, 6R]
  return {rotate(norm_weight(parts[0], w_q, eps), c, s), rotate(norm_weight(parts[1], w_k, eps), c, s), parts[2]};
}

Triple fused_h3_qk_norm_rope(const Tensor& qkv, const Tensor& w_q, const Tensor& w_k, double eps, const Tensor& cos,
                             const Tensor& sin, bool aten) {
  check_shapes(qkv, w_q, w_k, cos, sin);
  auto out = QkNormRopeFn::apply(qkv, w_q, w_k, eps, cos, sin, use_cuda(qkv, w_q, w_k, aten));
  return {out[0], out[1], out[2]};
}

Triple h3_qk_norm_rope(const Tensor& qkv, const Tensor& w_q, const Tensor& w_k, double eps, const Tensor& cos,
                       const Tensor& sin) {
  if (!fused_kernels_on()) return h3_qk_norm_rope_reference(qkv, w_q, w_k, eps, cos, sin);
  return fused_h3_qk_norm_rope(qkv, w_q, w_k, eps, cos, sin, /*aten=*/false);
}

Tensor h3_qk_norm_rope_into(const Tensor& qkv, const Tensor& w_q, const Tensor& w_k, double eps, const Tensor& cos,
                            const Tensor& sin, const Tensor& k_out, const Tensor& v_out) {
  check_shapes(qkv, w_q, w_k, cos, sin);
  const std::vector<int64_t> shape{qkv.size(0), qkv.size(1), qkv.size(3)};
  TORCH_CHECK(k_out.sizes() == shape && v_out.sizes() == shape, "h3_qk_norm_rope_into: expected k_out, v_out [",
              shape[0], ", ", shape[1], ", ", shape[2], "], got ", k_out.sizes(), " and ", v_out.sizes());
  TORCH_CHECK(!torch::GradMode::is_enabled() || !qkv.requires_grad(),
              "h3_qk_norm_rope_into: inference only (the "
              "cache's rows keep no graph); use h3_qk_norm_rope under autograd");
#ifdef VDT_WITH_CUDA_KERNELS
  if (fused_kernels_on() && use_cuda(qkv, w_q, w_k, false) && k_out.is_contiguous() &&
      k_out.scalar_type() == qkv.scalar_type()) {
    auto q = std::get<0>(cuda::qk_norm_rope_forward(qkv, w_q, w_k, eps, cos, sin, k_out));
    v_out.copy_(qkv.select(2, 2));  // [S, N, 3, Dh] -> [S, N, Dh]
    return q;
  }
#endif
  auto [q, k, v] = h3_qk_norm_rope(qkv, w_q, w_k, eps, cos, sin);
  k_out.copy_(k);
  v_out.copy_(v);
  return q;
}

}  // namespace vdt::kernels
