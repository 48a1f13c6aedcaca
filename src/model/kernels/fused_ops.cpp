// Fused elementwise ops: switch, dispatch, the autograd Functions and the ATen fallback of their backward.
// Gradients (fp32 inside, g = the output's gradient, per token row i with modulation row r(i)):
//   LayerNorm + modulate  out = h * (1 + scale) + shift, h = n rounded to x's dtype, n = (x - mean) * rstd
//     dshift[r] = sum g;  dscale[r] = sum g * h;  dn = g * (1 + scale);  dx = rstd * (dn - mean(dn) - n * mean(dn * n))
//     (+ the gradient of its second output x: the residual branch)
//   gate + residual       out = x + gate * y:  dx = g;  dy = g * gate;  dgate[r] = sum g * y
//   affine LayerNorm      out = n * w + b:  dw = sum g * n;  db = sum g;  dn = g * w;  dx as above (+ the residual's)
//   H3 modulate           out = x * (1 + scale) + shift:  dx = g * (1 + scale);  dscale[r] = sum g * x;  dshift[r] =
//   sum g
// The reference differs only where it rounds an intermediate gradient to bfloat16 (autograd keeps each tensor's dtype);
// these sums accumulate in float32 and round once.
#include "model/kernels/fused_ops.h"

#include <torch/torch.h>

#include <atomic>

#include "model/kernels/reference_ops.h"
#ifdef VDT_WITH_CUDA_KERNELS
#include "model/kernels/fused_ops_backward_cuda.h"
#include "model/kernels/fused_ops_cuda.h"
#endif

namespace vdt::kernels {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<bool> switch_on{true};

// Whether FusedPath::automatic runs the CUDA kernels for x (activations) and mod (a modulation tensor).
bool use_cuda(const Tensor& x, const Tensor& mod, FusedPath path) {
#ifdef VDT_WITH_CUDA_KERNELS
  auto cuda_dtype = [](const Tensor& t) {
    return t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16;
  };
  return path == FusedPath::automatic && x.is_cuda() && cuda_dtype(x) &&
         (mod.scalar_type() == torch::kFloat32 || mod.scalar_type() == x.scalar_type()) &&
         cuda::device_supported(x.get_device());
#else
  return false;
#endif
}

}  // namespace

bool cuda_kernels_take(const Tensor& t) { return use_cuda(t, t, FusedPath::automatic); }

namespace {

#ifdef VDT_WITH_CUDA_KERNELS
#define VDT_CUDA_ONLY(...) __VA_ARGS__
#else
// Unreachable without the kernels (use_cuda is false): keeps the call sites compiling.
#define VDT_CUDA_ONLY(...) TORCH_CHECK(false, "vdt was built without its CUDA kernels")
#endif

torch::ScalarType dtype_of(AutogradContext* ctx, const char* key) {
  return static_cast<torch::ScalarType>(ctx->saved_data[key].toInt());
}

// ---- Wan: LayerNorm (no affine) + modulate ------------------------------------------------------------------------
// Outputs (x, out): x comes back (a view) for the residual add that follows the branch, so that this one node receives
// the residual stream's gradient of x too and adds it into dx in the same pass (no separate accumulation add).
struct ModulatedNormFn : torch::autograd::Function<ModulatedNormFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& shift, const Tensor& scale,
                               double eps, bool cuda) {
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["G"] = shift.size(1);
    ctx->saved_data["shift_dtype"] = static_cast<int64_t>(shift.scalar_type());
    ctx->saved_data["scale_dtype"] = static_cast<int64_t>(scale.scalar_type());
    if (cuda) {
      VDT_CUDA_ONLY(auto [out, mean, rstd] = cuda::modulated_norm_forward(x, shift, scale, eps);
                    ctx->save_for_backward({x, scale, mean, rstd}); return {x, out};);
    }
    ctx->save_for_backward({x, scale});                          // the statistics are recomputed in backward
    return {x, reference_modulated_norm(x, shift, scale, eps)};  // autograd is off here: the reference ops, no graph
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& scale = saved[1];
    const auto& res = grads[0];  // the residual stream's gradient of x (undefined when x was not used again)
    const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = ctx->saved_data["G"].toInt();
    const bool want_x = ctx->needs_input_grad(0), want_shift = ctx->needs_input_grad(1),
               want_scale = ctx->needs_input_grad(2);
    if (!grads[1].defined()) return {want_x ? res : Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    Tensor dx, dshift, dscale;
    if (ctx->saved_data["cuda"].toBool()) {
      VDT_CUDA_ONLY(
          const auto go = grads[1].to(x.scalar_type()).contiguous(); const auto& mean = saved[2], &rstd = saved[3];
          if (want_x) {
            std::tie(dx, dscale, dshift) =
                cuda::modulated_norm_backward(go, x, mean, rstd, scale, res, want_shift || want_scale, want_shift);
          } else if (want_shift || want_scale) {
            std::tie(dscale, dshift) = cuda::modulated_norm_sums(go, x, mean, rstd, G, want_shift);
          });
    } else {
      const double eps = ctx->saved_data["eps"].toDouble();
      const auto go = grads[1].to(torch::kFloat32).view({B, G, L / G, D});  // [B, L, D] -> [B, G, L/G, D]
      const auto xf = x.to(torch::kFloat32).view({B, G, L / G, D});
      const auto xc = xf - xf.mean(-1, /*keepdim=*/true);
      const auto rstd = torch::rsqrt(xc.pow(2).mean(-1, /*keepdim=*/true) + eps);  // [B, G, L/G, 1]
      const auto n = xc * rstd;
      if (want_x) {
        const auto dn = go * (1 + scale.to(torch::kFloat32));
        dx = (rstd * (dn - dn.mean(-1, true) - n * (dn * n).mean(-1, true))).view({B, L, D});  // -> [B, L, D]
        dx = dx.to(x.scalar_type());
        if (res.defined()) dx = dx + res;  // what autograd's accumulation of the two branches would add
      }
      if (want_shift) dshift = go.sum(2, /*keepdim=*/true);  // [B, G, 1, D]
      if (want_scale)
        dscale = (go * n.to(x.scalar_type()).to(torch::kFloat32)).sum(2, /*keepdim=*/true);  // h as forward
    }
    if (dshift.defined() && want_shift)
      dshift = dshift.to(dtype_of(ctx, "shift_dtype"));
    else
      dshift = Tensor();
    if (dscale.defined() && want_scale)
      dscale = dscale.to(dtype_of(ctx, "scale_dtype"));
    else
      dscale = Tensor();
    return {dx, dshift, dscale, Tensor(), Tensor()};
  }
};

// ---- Wan: gate + residual -------------------------------------------------------------------------------------------
struct GatedAddFn : torch::autograd::Function<GatedAddFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& y, const Tensor& gate, bool cuda) {
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["G"] = gate.size(1);
    ctx->saved_data["gate_dtype"] = static_cast<int64_t>(gate.scalar_type());
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(y.scalar_type());
    // y only when dgate is wanted (as autograd's mul would keep it); gate always: the CUDA backward reads its
    // [B, G, 1, D] layout even when only dgate is wanted, and it is small.
    ctx->save_for_backward({gate.requires_grad() ? y : Tensor(), gate});
    if (cuda) VDT_CUDA_ONLY(return cuda::gated_add_forward(x, y, gate););
    return reference_gated_add(x, y, gate);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& y = saved[0];
    const auto& gate = saved[1];
    const auto& go = grads[0];
    const int64_t B = go.size(0), L = go.size(1), D = go.size(2), G = ctx->saved_data["G"].toInt();
    const auto y_dtype = dtype_of(ctx, "y_dtype");
    Tensor dy, dgate;
    if (ctx->saved_data["cuda"].toBool()) {
      VDT_CUDA_ONLY(std::tie(dy, dgate) = cuda::gated_add_backward(go, y, gate, y_dtype, ctx->needs_input_grad(1),
                                                                   ctx->needs_input_grad(2)););
    } else {
      const auto gf = go.to(torch::kFloat32).view({B, G, L / G, D});  // [B, L, D] -> [B, G, L/G, D]
      if (ctx->needs_input_grad(1)) dy = (gf * gate.to(torch::kFloat32)).view({B, L, D}).to(y_dtype);
      if (ctx->needs_input_grad(2))
        dgate = (gf * y.to(torch::kFloat32).view({B, G, L / G, D})).sum(2, /*keepdim=*/true);  // [B, G, 1, D]
    }
    if (dgate.defined()) dgate = dgate.to(dtype_of(ctx, "gate_dtype"));
    return {ctx->needs_input_grad(0) ? go : Tensor(), dy, dgate, Tensor()};
  }
};

// ---- Wan: affine LayerNorm (norm3), x handed on to the cross-attention's residual add -----------------------------
// Forward and the fallback's backward are ATen's own (native_layer_norm and its backward, as torch::nn::LayerNorm
// runs them); the CUDA backward is one pass that also adds the residual branch's gradient of x.
struct LayerNormFn : torch::autograd::Function<LayerNormFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                               double eps, bool cuda) {
    auto [out, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, weight, bias, eps);
    ctx->saved_data["cuda"] = cuda;
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    return {x, out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3], &rstd = saved[4];
    const auto& res = grads[0];  // the residual stream's gradient of x
    const bool want_x = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1), want_b = ctx->needs_input_grad(2);
    if (!grads[1].defined()) return {want_x ? res : Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    Tensor dx, dw, db;
    if (ctx->saved_data["cuda"].toBool() && want_x) {
      VDT_CUDA_ONLY(
          std::tie(dx, dw, db) = cuda::layer_norm_backward(grads[1], x, mean, rstd, weight, bias, res, want_w, want_b);
          if (dw.defined()) dw = dw.to(weight.scalar_type()); if (db.defined()) db = db.to(bias.scalar_type()););
    } else {
      std::tie(dx, dw, db) =
          at::native_layer_norm_backward(grads[1], x, {x.size(-1)}, mean, rstd, weight, bias, {want_x, want_w, want_b});
      if (want_x && res.defined()) dx = dx + res;  // what autograd's accumulation of the two branches would add
    }
    return {want_x ? dx : Tensor(), want_w ? dw : Tensor(), want_b ? db : Tensor(), Tensor(), Tensor()};
  }
};

// Sums over the tokens of each modulation row (ATen): [S, D] float32 values, rows [S] -> [R, D] float32
Tensor sum_rows(const Tensor& v, const Tensor& rows, int64_t R) {
  return torch::zeros({R, v.size(1)}, v.options()).index_add_(0, rows, v);
}

// ---- H3: modulate (the RMSNorm output is x) -------------------------------------------------------------------------
struct H3ModulateFn : torch::autograd::Function<H3ModulateFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& shift, const Tensor& scale,
                        const Tensor& rows, bool cuda) {
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["R"] = shift.size(0);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["mod_dtype"] = static_cast<int64_t>(shift.scalar_type());
    ctx->save_for_backward({scale.requires_grad() ? x : Tensor(), x.requires_grad() ? scale : Tensor(), rows});
    if (cuda) VDT_CUDA_ONLY(return cuda::h3_modulate_forward(x, shift, scale, rows););
    return reference_h3_modulate(x, shift, scale, rows);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &scale = saved[1], &rows = saved[2];
    const int64_t R = ctx->saved_data["R"].toInt();
    const auto x_dtype = dtype_of(ctx, "x_dtype"), mod_dtype = dtype_of(ctx, "mod_dtype");
    const bool want_x = ctx->needs_input_grad(0), want_shift = ctx->needs_input_grad(1),
               want_scale = ctx->needs_input_grad(2);
    Tensor dx, dshift, dscale;
    if (ctx->saved_data["cuda"].toBool()) {
      VDT_CUDA_ONLY(const auto go = grads[0].to(x_dtype).contiguous();
                    if (want_x) dx = cuda::rows_scale(go, scale, rows, /*one_plus=*/true, x_dtype);
                    if (want_scale) std::tie(dscale, dshift) = cuda::row_sums(go, x, rows, R, want_shift);
                    else if (want_shift) dshift = sum_rows(go.to(torch::kFloat32), rows, R););
    } else {
      const auto go = grads[0].to(torch::kFloat32);
      // 1 + scale in scale's dtype, as the reference rounds it, then float32
      if (want_x) dx = (go * (1.0 + scale).index_select(0, rows).to(torch::kFloat32)).to(x_dtype);
      if (want_shift) dshift = sum_rows(go, rows, R);
      if (want_scale) dscale = sum_rows(go * x.to(torch::kFloat32), rows, R);
    }
    if (dshift.defined() && want_shift)
      dshift = dshift.to(mod_dtype);
    else
      dshift = Tensor();
    if (dscale.defined()) dscale = dscale.to(mod_dtype);
    return {dx, dshift, dscale, Tensor(), Tensor()};
  }
};

// ---- H3: gate + residual --------------------------------------------------------------------------------------------
struct H3GateFn : torch::autograd::Function<H3GateFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& rows,
                        bool cuda) {
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["R"] = gate.size(0);
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(y.scalar_type());
    ctx->saved_data["gate_dtype"] = static_cast<int64_t>(gate.scalar_type());
    ctx->save_for_backward({gate.requires_grad() ? y : Tensor(), y.requires_grad() ? gate : Tensor(), rows});
    if (cuda) VDT_CUDA_ONLY(return cuda::h3_gate_forward(x, gate, y, rows););
    return reference_h3_gate(x, gate, y, rows);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &y = saved[0], &gate = saved[1], &rows = saved[2];
    const int64_t R = ctx->saved_data["R"].toInt();
    const auto y_dtype = dtype_of(ctx, "y_dtype");
    const auto& go = grads[0];
    Tensor dy, dgate;
    if (ctx->saved_data["cuda"].toBool()) {
      VDT_CUDA_ONLY(const auto g = go.contiguous();
                    if (ctx->needs_input_grad(2)) dy = cuda::rows_scale(g, gate, rows, /*one_plus=*/false, y_dtype);
                    if (ctx->needs_input_grad(1)) dgate = std::get<0>(cuda::row_sums(g, y, rows, R, false)););
    } else {
      const auto gf = go.to(torch::kFloat32);
      if (ctx->needs_input_grad(2)) dy = (gf * gate.index_select(0, rows).to(torch::kFloat32)).to(y_dtype);
      if (ctx->needs_input_grad(1)) dgate = sum_rows(gf * y.to(torch::kFloat32), rows, R);
    }
    if (dgate.defined()) dgate = dgate.to(dtype_of(ctx, "gate_dtype"));
    return {ctx->needs_input_grad(0) ? go : Tensor(), dgate, dy, Tensor(), Tensor()};
  }
};

void check_wan(const char* op, const Tensor& x, const Tensor& mod, const char* mod_name) {
  TORCH_CHECK(x.dim() == 3 && mod.dim() == 4 && mod.size(0) == x.size(0) && mod.size(2) == 1 &&
                  mod.size(3) == x.size(2) && mod.size(1) > 0 && x.size(1) % mod.size(1) == 0,
              op, ": expected x [B, L, D] and ", mod_name, " [B, G, 1, D] with G dividing L, got x ", x.sizes(),
              " and ", mod_name, " ", mod.sizes());
}

void check_h3(const char* op, const Tensor& x, const Tensor& mod, const char* mod_name, const Tensor& rows) {
  TORCH_CHECK(x.dim() == 2 && mod.dim() == 2 && mod.size(1) == x.size(1) && rows.dim() == 1 &&
                  rows.size(0) == x.size(0) && rows.scalar_type() == torch::kInt64 && rows.device() == x.device(),
              op, ": expected x [S, D], ", mod_name, " [R, D] and rows [S] int64 on x's device, got x ", x.sizes(),
              ", ", mod_name, " ", mod.sizes(), ", rows ", rows.sizes(), " ", rows.scalar_type(), " on ",
              rows.device());
}

void check_same(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), op, ": ", a_name, " ", a.sizes(), " (",
              a.scalar_type(), ") does not match ", b_name, " ", b.sizes(), " (", b.scalar_type(), ")");
}

}  // namespace

void set_fused_kernels(bool on) { switch_on = on; }
bool fused_kernels_on() { return switch_on; }

bool cuda_kernels_built() {
#ifdef VDT_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

std::string fused_backend(const torch::Tensor& x, const torch::Tensor& mod) {
  return use_cuda(x, mod, FusedPath::automatic) ? "cuda" : "aten";
}

Tensor fused_modulated_norm(const Tensor& x, const Tensor& shift, const Tensor& scale, double eps, FusedPath path) {
  check_wan("modulated_norm", x, shift, "shift");
  check_same("modulated_norm", scale, "scale", shift, "shift");
  return ModulatedNormFn::apply(x, shift, scale, eps, use_cuda(x, shift, path))[1];
}

std::pair<Tensor, Tensor> fused_modulated_norm_branch(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                                      double eps, FusedPath path) {
  check_wan("modulated_norm", x, shift, "shift");
  check_same("modulated_norm", scale, "scale", shift, "shift");
  auto out = ModulatedNormFn::apply(x, shift, scale, eps, use_cuda(x, shift, path));
  return {out[0], out[1]};
}

std::pair<Tensor, Tensor> fused_layer_norm_branch(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                                                  FusedPath path) {
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && bias.dim() == 1 && weight.size(0) == x.size(-1) &&
                  bias.size(0) == x.size(-1),
              "layer_norm: expected x [..., D] with weight and bias [D], got x ", x.sizes(), ", weight ",
              weight.sizes(), ", bias ", bias.sizes());
  auto out = LayerNormFn::apply(x, weight, bias, eps, use_cuda(x, weight, path));
  return {out[0], out[1]};
}

Tensor fused_gated_add(const Tensor& x, const Tensor& y, const Tensor& gate, FusedPath path) {
  check_wan("gated_add", x, gate, "gate");
  check_same("gated_add", y, "y", x, "x");
  return GatedAddFn::apply(x, y, gate, use_cuda(x, gate, path));
}

Tensor fused_h3_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, const Tensor& rows,
                         FusedPath path) {
  check_h3("h3_modulate", x, shift, "shift", rows);
  check_same("h3_modulate", scale, "scale", shift, "shift");
  return H3ModulateFn::apply(x, shift, scale, rows, use_cuda(x, shift, path));
}

Tensor fused_h3_gate(const Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& rows, FusedPath path) {
  check_h3("h3_gate", x, gate, "gate", rows);
  check_same("h3_gate", y, "y", x, "x");
  return H3GateFn::apply(x, gate, y, rows, use_cuda(x, gate, path));
}

Tensor modulated_norm(const Tensor& x, const Tensor& shift, const Tensor& scale, double eps) {
  return fused_kernels_on() ? fused_modulated_norm(x, shift, scale, eps)
                            : reference_modulated_norm(x, shift, scale, eps);
}

std::pair<Tensor, Tensor> modulated_norm_branch(const Tensor& x, const Tensor& shift, const Tensor& scale, double eps) {
  if (fused_kernels_on()) return fused_modulated_norm_branch(x, shift, scale, eps);
  return {x, reference_modulated_norm(x, shift, scale, eps)};
}

std::pair<Tensor, Tensor> layer_norm_branch(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  if (fused_kernels_on()) return fused_layer_norm_branch(x, weight, bias, eps);
  return {x, torch::layer_norm(x, {x.size(-1)}, weight, bias, eps)};
}

Tensor gated_add(const Tensor& x, const Tensor& y, const Tensor& gate) {
  return fused_kernels_on() ? fused_gated_add(x, y, gate) : reference_gated_add(x, y, gate);
}

Tensor h3_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, const Tensor& rows) {
  return fused_kernels_on() ? fused_h3_modulate(x, shift, scale, rows) : reference_h3_modulate(x, shift, scale, rows);
}

Tensor h3_gate(const Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& rows) {
  return fused_kernels_on() ? fused_h3_gate(x, gate, y, rows) : reference_h3_gate(x, gate, y, rows);
}

}  // namespace vdt::kernels
