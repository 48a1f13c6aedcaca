// The Wan q/k RMSNorm + RoPE node (wan_qk_norm_rope.h): dispatch, the autograd Function and its ATen fallback.
// Backward per part p in {q, k}, rows of D (float32): gy = rope^T(g) (per pair: gy0 = g0 c + g1 s, gy1 = g1 c - g0 s),
// gn = gy * w, nf = x * rstd, dx = rstd * (gn - nf * mean(gn * nf)); dw = sum over rows of gy * n (n = nf rounded to
// x's dtype, as forward multiplies the rounded value by the weight). The reference differs only where autograd rounds
// an intermediate gradient to bfloat16; here everything stays float32 until the result.
#include "model/kernels/wan_qk_norm_rope.h"

#include <ATen/ops/rms_norm.h>
#include <torch/torch.h>

#include "model/embeddings.h"
#include "model/kernels/fused_ops.h"
#ifdef VDT_WITH_CUDA_KERNELS
#include "model/kernels/fused_ops_cuda.h"
#include "model/kernels/wan_qk_norm_rope_cuda.h"
#endif

namespace vdt::kernels {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Pair = std::tuple<Tensor, Tensor>;

bool use_cuda(const Tensor& x, const Tensor& w_q, const Tensor& w_k, bool aten) {
#ifdef VDT_WITH_CUDA_KERNELS
  const auto dt = x.scalar_type();
  return !aten && x.is_cuda() && (dt == torch::kBFloat16 || dt == torch::kFloat32) && w_q.scalar_type() == dt &&
         w_k.scalar_type() == dt && x.size(-1) <= cuda::kWanQkMaxWidth && cuda::device_supported(x.get_device());
#else
  (void)x, (void)w_q, (void)w_k, (void)aten;
  return false;
#endif
}

// The ATen form of the backward of one part: x [B, L, D], g [B, L, N, Dh], cos / sin [L, Dh/2] float32 (undefined:
// no RoPE, g [B, L, D]) -> (dx [B, L, D] float32, dw [D] float32 or undefined).
Pair backward_part(const Tensor& x_in, const Tensor& g_in, const Tensor& w, double eps, const Tensor& cos,
                   const Tensor& sin, bool want_w) {
  const int64_t B = x_in.size(0), L = x_in.size(1), D = x_in.size(2);
  const auto x = x_in.to(torch::kFloat32);
  const auto rstd = torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);  // [B, L, 1]
  const auto nf = x * rstd;
  Tensor gy = g_in.to(torch::kFloat32).reshape({B, L, D});
  if (cos.defined()) {
    const int64_t N = g_in.size(2), H2 = g_in.size(3) / 2;
    const auto g = gy.reshape({B, L, N, H2, 2});                                   // [B, L, D] -> [B, L, N, Dh/2, 2]
    const auto g0 = g.select(-1, 0), g1 = g.select(-1, 1);                         // [B, L, N, Dh/2]
    const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);                         // [L, 1, Dh/2]
    gy = torch::stack({g0 * c + g1 * s, g1 * c - g0 * s}, -1).reshape({B, L, D});  // -> [B, L, D]
  }
  Tensor dw;
  if (want_w) dw = (gy * nf.to(x_in.scalar_type()).to(torch::kFloat32)).sum(std::vector<int64_t>{0, 1});
  const auto gn = gy * w.to(torch::kFloat32);
  return {rstd * (gn - nf * (gn * nf).mean(-1, /*keepdim=*/true)), dw};
}

struct WanQkNormRopeFn : torch::autograd::Function<WanQkNormRopeFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& q_in, const Tensor& k_in, const Tensor& w_q,
                               const Tensor& w_k, double eps, const Tensor& cos, const Tensor& sin, int64_t heads,
                               bool cuda) {
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["cuda"] = cuda;
    if (cuda) {
#ifdef VDT_WITH_CUDA_KERNELS
      auto [q, k, rstd] = cuda::wan_qk_norm_rope_forward(q_in, k_in, w_q, w_k, eps, cos, sin, heads);
      ctx->save_for_backward({q_in, k_in, w_q, w_k, cos, sin, rstd});
      return {q, k};
#endif
    }
    ctx->save_for_backward({q_in, k_in, w_q, w_k, cos, sin, Tensor()});
    auto [q, k] = wan_qk_norm_rope_reference(q_in, k_in, w_q, w_k, eps, cos, sin, heads);  // autograd is off: no graph
    return {q.contiguous(), k.contiguous()};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q_in = saved[0], &k_in = saved[1], &w_q = saved[2], &w_k = saved[3], &cos = saved[4], &sin = saved[5];
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool want_x = ctx->needs_input_grad(0) || ctx->needs_input_grad(1);
    const bool want_w = ctx->needs_input_grad(2) || ctx->needs_input_grad(3);
    const int64_t B = q_in.size(0), L = q_in.size(1), D = q_in.size(2), Dh = 2 * cos.size(1);
    auto grad = [&](int i) {  // [B, L, N, Dh]
      return grads[i].defined() ? grads[i] : torch::zeros({B, L, D / Dh, Dh}, q_in.options());
    };
    Tensor dx[2], dw[2];
    if (ctx->saved_data["cuda"].toBool()) {
#ifdef VDT_WITH_CUDA_KERNELS
      auto [dq, dk, dws] =
          cuda::wan_qk_norm_rope_backward(grad(0).to(q_in.scalar_type()), grad(1).to(q_in.scalar_type()), q_in, k_in,
                                          w_q, w_k, saved[6], cos, sin, want_w);
      dx[0] = dq, dx[1] = dk;
      if (want_w) dw[0] = dws[0].to(w_q.scalar_type()), dw[1] = dws[1].to(w_k.scalar_type());
#endif
    } else if (want_x || want_w) {
      for (int p = 0; p < 2; ++p) {
        auto [d, w] = backward_part(p ? k_in : q_in, grad(p), p ? w_k : w_q, eps, cos, sin, want_w);
        dx[p] = d.to(q_in.scalar_type());
        if (want_w) dw[p] = w.to((p ? w_k : w_q).scalar_type());
      }
    }
    variable_list out(9);
    for (int p = 0; p < 2; ++p) {
      if (ctx->needs_input_grad(p)) out[p] = dx[p];
      if (ctx->needs_input_grad(2 + p)) out[2 + p] = dw[p];
    }
    return out;
  }
};

// The plain norm (no RoPE) of one tensor, cross-attention's q and k: y = RMSNorm_D(x) * w.
struct WanRmsNormFn : torch::autograd::Function<WanRmsNormFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, double eps, bool cuda) {
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["cuda"] = cuda;
    if (cuda) {
#ifdef VDT_WITH_CUDA_KERNELS
      auto [y, rstd] = cuda::wan_rms_norm_forward(x, w, eps);
      ctx->save_for_backward({x, w, rstd});
      return {y};
#endif
    }
    ctx->save_for_backward({x, w, Tensor()});
    return {wan_rms_norm_reference(x, w, eps).contiguous()};  // autograd is off: no graph
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const bool want_w = ctx->needs_input_grad(1);
    const auto g = grads[0].defined() ? grads[0] : torch::zeros_like(x);
    Tensor dx, dw;
    if (ctx->saved_data["cuda"].toBool()) {
#ifdef VDT_WITH_CUDA_KERNELS
      std::tie(dx, dw) = cuda::wan_rms_norm_backward(g.to(x.scalar_type()), x, w, saved[2], want_w);
#endif
    } else {
      std::tie(dx, dw) = backward_part(x, g, w, ctx->saved_data["eps"].toDouble(), Tensor(), Tensor(), want_w);
    }
    return {ctx->needs_input_grad(0) ? dx.to(x.scalar_type()) : Tensor(), want_w ? dw.to(w.scalar_type()) : Tensor(),
            Tensor(), Tensor()};
  }
};

void check_shapes(const Tensor& q_in, const Tensor& k_in, const Tensor& w_q, const Tensor& w_k, const Tensor& cos,
                  const Tensor& sin, int64_t heads) {
  TORCH_CHECK(q_in.dim() == 3 && k_in.sizes() == q_in.sizes() && k_in.scalar_type() == q_in.scalar_type(),
              "wan_qk_norm_rope: expected q_in, k_in [B, L, D] of one dtype, got ", q_in.sizes(), " ",
              q_in.scalar_type(), " and ", k_in.sizes(), " ", k_in.scalar_type());
  const int64_t L = q_in.size(1), D = q_in.size(2);
  TORCH_CHECK(heads > 0 && D % heads == 0 && (D / heads) % 2 == 0, "wan_qk_norm_rope: width ", D, " does not split ",
              "into ", heads, " heads of an even width");
  TORCH_CHECK(w_q.dim() == 1 && w_q.size(0) == D && w_k.sizes() == w_q.sizes(), "wan_qk_norm_rope: expected w_q, w_k [",
              D, "], got ", w_q.sizes(), " and ", w_k.sizes());
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == L && cos.size(1) == D / heads / 2 && sin.sizes() == cos.sizes() &&
                  cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32,
              "wan_qk_norm_rope: expected cos, sin [L=", L, ", Dh/2=", D / heads / 2, "] float32, got ", cos.sizes(),
              " ", cos.scalar_type(), " and ", sin.sizes(), " ", sin.scalar_type());
}

}  // namespace

std::string wan_qk_backend(const Tensor& q_in, const Tensor& w_q) {
  return use_cuda(q_in, w_q, w_q, /*aten=*/false) ? "cuda" : "aten";
}

Pair wan_qk_norm_rope_reference(const Tensor& q_in, const Tensor& k_in, const Tensor& w_q, const Tensor& w_k,
                                double eps, const Tensor& cos, const Tensor& sin, int64_t heads) {
  check_shapes(q_in, k_in, w_q, w_k, cos, sin, heads);
  const RopeTable rope{cos, sin};
  // As RMSNormImpl (ATen rms_norm, cast before the weight multiply), then apply_rope: [B, L, D] -> [B, L, N, Dh]
  auto norm = [&](const Tensor& x, const Tensor& w) {
    return (at::rms_norm(x, {x.size(-1)}, std::nullopt, eps) * w).unflatten(-1, {heads, -1});
  };
  return {apply_rope(norm(q_in, w_q), rope), apply_rope(norm(k_in, w_k), rope)};
}

Pair fused_wan_qk_norm_rope(const Tensor& q_in, const Tensor& k_in, const Tensor& w_q, const Tensor& w_k, double eps,
                            const Tensor& cos, const Tensor& sin, int64_t heads, bool aten) {
  check_shapes(q_in, k_in, w_q, w_k, cos, sin, heads);
  auto out = WanQkNormRopeFn::apply(q_in, k_in, w_q, w_k, eps, cos, sin, heads, use_cuda(q_in, w_q, w_k, aten));
  return {out[0], out[1]};
}

Pair wan_qk_norm_rope(const Tensor& q_in, const Tensor& k_in, const Tensor& w_q, const Tensor& w_k, double eps,
                      const Tensor& cos, const Tensor& sin, int64_t heads) {
  if (!fused_kernels_on()) return wan_qk_norm_rope_reference(q_in, k_in, w_q, w_k, eps, cos, sin, heads);
  return fused_wan_qk_norm_rope(q_in, k_in, w_q, w_k, eps, cos, sin, heads, /*aten=*/false);
}

Tensor wan_rms_norm_reference(const Tensor& x, const Tensor& w, double eps) {
  // ATen's rms_norm without the weight, so the cast to x's dtype comes before the weight multiply, as in Wan
  return at::rms_norm(x, {x.size(-1)}, std::nullopt, eps) * w;
}

Tensor fused_wan_rms_norm(const Tensor& x, const Tensor& w, double eps, bool aten) {
  TORCH_CHECK(x.dim() >= 2 && w.dim() == 1 && w.size(0) == x.size(-1) && w.scalar_type() == x.scalar_type(),
              "wan_rms_norm: expected x [..., D] and w [D] of x's dtype, got ", x.sizes(), " ", x.scalar_type(),
              " and ", w.sizes(), " ", w.scalar_type());
  const auto x3 = x.reshape({1, -1, x.size(-1)});  // [..., D] -> [1, rows, D] (H3's blocks norm [S, D])
  return WanRmsNormFn::apply(x3, w, eps, use_cuda(x, w, w, aten))[0].view(x.sizes());
}

Tensor wan_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  // The node only where its CUDA kernel runs; elsewhere the reference ops (no speed to gain on the CPU, and the CPU
  // golden curves keep autograd's own backward).
  if (!fused_kernels_on() || x.dim() < 2 || !use_cuda(x, w, w, /*aten=*/false))
    return wan_rms_norm_reference(x, w, eps);
  return fused_wan_rms_norm(x, w, eps, /*aten=*/false);
}

}  // namespace vdt::kernels
