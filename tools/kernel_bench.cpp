// The fused-op check and timing of `vdt bench kernels` (tools/kernel_bench.h).
#include "tools/kernel_bench.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>

#include "core/device_flag.h"
#include "core/error.h"
#include "model/kernels/fp8_linear.h"
#include "model/kernels/fused_ops.h"
#include "model/kernels/qk_norm_rope.h"
#include "model/kernels/reference_ops.h"
#include "model/kernels/row_gather.h"
#include "model/kernels/swiglu.h"
#include "model/kernels/wan_qk_norm_rope.h"
#include "model/embeddings.h"

namespace vdt {
namespace {

using Op = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

struct OpCase {
  std::string name, shape;
  Op fused, reference;
  std::vector<torch::Tensor> inputs;  // the differentiable ones first, then indices
  std::vector<std::string> names;     // of the differentiable inputs
  torch::Tensor go;                   // upstream gradient (float32)
  // Optional, for ops whose reference is not the exact math (FP8: the emulation of its rounding): the truth evaluated
  // in float64 (default: the reference), the op timed against (default: the reference), the backend's name (default:
  // fused_backend) and the fused-vs-reference tolerances (0: the dtype's).
  Op truth = {}, timed_reference = {};
  std::string backend = {};
  double out_tol = 0, grad_tol = 0;
};

// Output and gradients of every differentiable input, on fresh leaves (in `as` when given: the float64 truth).
std::vector<torch::Tensor> outputs(const OpCase& c, const Op& op, std::optional<torch::ScalarType> as = std::nullopt) {
  std::vector<torch::Tensor> leaves;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    auto t = c.inputs[i].detach();
    if (i < c.names.size()) t = (as ? t.to(*as) : t.clone()).requires_grad_(true);
    leaves.push_back(t);
  }
  auto out = op(leaves);
  out.backward(c.go.to(out.scalar_type()));
  std::vector<torch::Tensor> r{out.detach()};
  for (size_t i = 0; i < c.names.size(); ++i) r.push_back(leaves[i].grad());
  return r;
}

void sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

// Mean milliseconds of one forward + backward.
double time_ms(const OpCase& c, const Op& op, int warmup, int iters) {
  std::vector<torch::Tensor> leaves;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    leaves.push_back(i < c.names.size() ? c.inputs[i].detach().clone().requires_grad_(true) : c.inputs[i]);
  const auto go = c.go.to(c.inputs[0].scalar_type());
  const auto device = c.inputs[0].device();
  auto pass = [&] {
    for (size_t i = 0; i < c.names.size(); ++i) leaves[i].mutable_grad() = torch::Tensor();
    op(leaves).backward(go);
  };
  for (int i = 0; i < warmup; ++i) pass();
  sync(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) pass();
  sync(device);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

double max_abs(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}
double max_rel(const torch::Tensor& a, const torch::Tensor& ref) {
  return max_abs(a, ref) / std::max(ref.to(torch::kFloat64).abs().max().item<double>(), 1e-30);
}

std::vector<OpCase> cases(const KernelBenchConfig& cfg, torch::ScalarType dt) {
  const torch::Device device = resolve_device(cfg.device);
  const bool real = cfg.shapes == "real";
  const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  // Wan 5B SFT: one sample, 21 frames of 390 tokens, per-frame modulation groups; H3: 12,686 rows, 7 timesteps x 3
  // modalities of AdaLN rows in the activations' dtype (the release's bf16 AdaLN).
  const int64_t B = real ? 1 : 2, L = real ? 8190 : 42, D = real ? 3072 : 40, G = real ? 21 : 3;
  const int64_t S = real ? 12686 : 50, Dh3 = real ? 5120 : 40, R = 21;
  torch::manual_seed(0);
  std::vector<OpCase> out;
  const auto wan_shape =
      "x [" + std::to_string(B) + ", " + std::to_string(L) + ", " + std::to_string(D) + "] G " + std::to_string(G);
  const auto h3_shape = "x [" + std::to_string(S) + ", " + std::to_string(Dh3) + "] R " + std::to_string(R);
  const auto x = (torch::randn({B, L, D}, f32) * 2 + 0.3).to(dt), y = torch::randn({B, L, D}, f32).to(dt);
  const auto shift = torch::randn({B, G, 1, D}, f32) * 0.3, scale = torch::randn({B, G, 1, D}, f32) * 0.3;
  const auto go = torch::randn({B, L, D}, f32);
  out.push_back({"modulated_norm",
                 wan_shape,
                 [](const auto& t) { return kernels::fused_modulated_norm(t[0], t[1], t[2], 1e-6); },
                 [](const auto& t) { return kernels::reference_modulated_norm(t[0], t[1], t[2], 1e-6); },
                 {x, shift, scale},
                 {"x", "shift", "scale"},
                 go});
  out.push_back({"gated_add",
                 wan_shape,
                 [](const auto& t) { return kernels::fused_gated_add(t[0], t[1], t[2]); },
                 [](const auto& t) { return kernels::reference_gated_add(t[0], t[1], t[2]); },
                 {x, y, shift},
                 {"x", "y", "gate"},
                 go});
  // The branch forms the blocks call: x goes on to the residual add (here `+ x`), its gradient added in the backward.
  out.push_back({"modulated_norm_branch",
                 wan_shape,
                 [](const auto& t) {
                   auto [x_res, h] = kernels::fused_modulated_norm_branch(t[0], t[1], t[2], 1e-6);
                   return h + x_res;
                 },
                 [](const auto& t) { return kernels::reference_modulated_norm(t[0], t[1], t[2], 1e-6) + t[0]; },
                 {x, shift, scale},
                 {"x", "shift", "scale"},
                 go});
  const auto ln_w = (1 + torch::randn({D}, f32) * 0.3).to(dt), ln_b = (torch::randn({D}, f32) * 0.3).to(dt);
  out.push_back({"layer_norm_branch",
                 wan_shape,
                 [](const auto& t) {
                   auto [x_res, h] = kernels::fused_layer_norm_branch(t[0], t[1], t[2], 1e-6);
                   return h + x_res;
                 },
                 [](const auto& t) { return torch::layer_norm(t[0], {t[0].size(-1)}, t[1], t[2], 1e-6) + t[0]; },
                 {x, ln_w, ln_b},
                 {"x", "weight", "bias"},
                 go});
  const auto hx = torch::randn({S, Dh3}, f32).to(dt), hy = torch::randn({S, Dh3}, f32).to(dt);
  const auto hs = (torch::randn({R, Dh3}, f32) * 0.3).to(dt), hc = (torch::randn({R, Dh3}, f32) * 0.3).to(dt);
  const auto rows = torch::randint(0, R, {S}, f32.dtype(torch::kInt64));
  const auto hgo = torch::randn({S, Dh3}, f32);
  out.push_back({"h3_modulate",
                 h3_shape,
                 [](const auto& t) { return kernels::fused_h3_modulate(t[0], t[1], t[2], t[3]); },
                 [](const auto& t) { return kernels::reference_h3_modulate(t[0], t[1], t[2], t[3]); },
                 {hx, hs, hc, rows},
                 {"x", "shift", "scale"},
                 hgo});
  out.push_back({"h3_gate",
                 h3_shape,
                 [](const auto& t) { return kernels::fused_h3_gate(t[0], t[1], t[2], t[3]); },
                 [](const auto& t) { return kernels::reference_h3_gate(t[0], t[1], t[2], t[3]); },
                 {hx, hs, hy, rows},
                 {"x", "gate", "y"},
                 hgo});
  // H3 q/k RMSNorm + RoPE: the fused projection [S, N, 3, Dh] of 56 heads of 128 (96 rotated channels); q, k, v
  // compared as one [S, N, 3 Dh] tensor.
  const int64_t N = real ? 56 : 3, Dh = real ? 128 : 20, Rr = real ? 16 : 3;
  const auto qkv = torch::randn({S, N, 3, Dh}, f32).to(dt);
  const auto wq = (1 + 0.3 * torch::randn({Dh}, f32)).to(dt), wk = (1 + 0.3 * torch::randn({Dh}, f32)).to(dt);
  const auto angles = torch::rand({S, 6 * Rr}, f32) * 60;
  const auto qk_go = torch::randn({S, N, 3 * Dh}, f32);
  auto qk = [](bool fused) {
    return [fused](const std::vector<torch::Tensor>& t) {
      auto r = fused ? kernels::fused_h3_qk_norm_rope(t[0], t[1], t[2], 1e-6, t[3], t[4], /*aten=*/false)
                     : kernels::h3_qk_norm_rope_reference(t[0], t[1], t[2], 1e-6, t[3], t[4]);
      return torch::cat({std::get<0>(r), std::get<1>(r), std::get<2>(r)}, -1);  // 3 x [S, N, Dh] -> [S, N, 3 Dh]
    };
  };
  out.push_back({"h3_qk_norm_rope",
                 "qkv [" + std::to_string(S) + ", " + std::to_string(N) + ", 3, " + std::to_string(Dh) + "]",
                 qk(true),
                 qk(false),
                 {qkv, wq, wk, angles.cos(), angles.sin()},
                 {"qkv", "w_q", "w_k"},
                 qk_go});
  // FP8 linear (model/kernels/fp8_linear.h): the GEMM at Wan 5B's attention width (8190 tokens, 3072 -> 3072), the
  // CUDA backend (quantization kernels + at::_scaled_mm) where the device runs it, else the emulation; compared with
  // the emulation (same quantized operands: only accumulation order and the bfloat16 rounding differ), measured
  // against the float64 linear (FP8's own error) and timed against the plain linear it replaces.
  const int64_t Mt = real ? 8190 : 37, Kin = real ? 3072 : 64, Nout = real ? 3072 : 48;
  const bool fp8_cuda = device.is_cuda() && kernels::fp8_unsupported_reason(device).empty();
  const auto fp8_backend = fp8_cuda ? kernels::Fp8Backend::cuda : kernels::Fp8Backend::emulate;
  OpCase fp8{"fp8_linear",
             "x [" + std::to_string(Mt) + ", " + std::to_string(Kin) + "] w [" + std::to_string(Nout) + ", " +
                 std::to_string(Kin) + "]",
             [fp8_backend](const auto& t) { return kernels::fp8_linear(t[0], t[1], t[2], fp8_backend); },
             [](const auto& t) { return kernels::fp8_linear(t[0], t[1], t[2], kernels::Fp8Backend::emulate); },
             {torch::randn({Mt, Kin}, f32).to(dt), (torch::randn({Nout, Kin}, f32) * 0.02).to(dt),
              torch::randn({Nout}, f32).to(dt)},
             {"x", "w", "b"},
             torch::randn({Mt, Nout}, f32)};
  fp8.truth = fp8.timed_reference = [](const auto& t) { return torch::linear(t[0], t[1], t[2]); };
  fp8.backend = fp8_cuda ? "scaled_mm+" + kernels::fp8_quant_backend(fp8.inputs[0]) + "_quant" : "emulate";
  fp8.out_tol = 1e-2, fp8.grad_tol = 2e-2;  // results are bfloat16 in both: a rounding flip is 2^-8 of a value
  out.push_back(fp8);
  // Wan q/k RMSNorm (over the full width) + 3-axis RoPE: the 5B SFT geometry, 8190 tokens = 21 x 15 x 26, 24 heads
  // of 128; q and k compared as one [B, L, N, 2 Dh] tensor.
  const int64_t WN = real ? 24 : 3, WDh = real ? 128 : 12;
  const std::array<int64_t, 3> grid = real ? std::array<int64_t, 3>{21, 15, 26} : std::array<int64_t, 3>{2, 3, 4};
  const auto rope = rope_table(WDh, grid, device);
  const int64_t WL = rope.cos.size(0), WD = WN * WDh;
  const auto wq_in = torch::randn({B, WL, WD}, f32).to(dt), wk_in = (torch::randn({B, WL, WD}, f32) * 0.5).to(dt);
  const auto wwq = (1 + 0.3 * torch::randn({WD}, f32)).to(dt), wwk = (1 + 0.3 * torch::randn({WD}, f32)).to(dt);
  auto wan_qk = [WN](bool fused) {
    return [fused, WN](const std::vector<torch::Tensor>& t) {
      auto r = fused ? kernels::fused_wan_qk_norm_rope(t[0], t[1], t[2], t[3], 1e-6, t[4], t[5], WN, /*aten=*/false)
                     : kernels::wan_qk_norm_rope_reference(t[0], t[1], t[2], t[3], 1e-6, t[4], t[5], WN);
      return torch::cat({std::get<0>(r), std::get<1>(r)}, -1);  // 2 x [B, L, N, Dh] -> [B, L, N, 2 Dh]
    };
  };
  out.push_back({"wan_qk_norm_rope",
                 "q_in [" + std::to_string(B) + ", " + std::to_string(WL) + ", " + std::to_string(WD) + "] N " +
                     std::to_string(WN),
                 wan_qk(true),
                 wan_qk(false),
                 {wq_in, wk_in, wwq, wwk, rope.cos, rope.sin},
                 {"q_in", "k_in", "w_q", "w_k"},
                 torch::randn({B, WL, WN, 2 * WDh}, f32)});
  out.back().backend = kernels::wan_qk_backend(wq_in, wwq);
  // The same kernels without RoPE: Wan cross-attention's q norm (and H3's block norms), x [B, L, D].
  out.push_back({"wan_rms_norm",
                 wan_shape,
                 [](const auto& t) { return kernels::fused_wan_rms_norm(t[0], t[1], 1e-6, false); },
                 [](const auto& t) { return kernels::wan_rms_norm_reference(t[0], t[1], 1e-6); },
                 {x, (1 + 0.3 * torch::randn({D}, f32)).to(dt)},
                 {"x", "w"},
                 go});
  out.back().backend = kernels::wan_qk_backend(x, out.back().inputs[1]);
  // H3's MLP activation: fc1's output [S, 2F] (gate | up) -> silu(gate) * up [S, F].
  const int64_t F = real ? 14336 : 24;
  out.push_back({"swiglu",
                 "h [" + std::to_string(S) + ", " + std::to_string(2 * F) + "]",
                 [](const auto& t) { return kernels::fused_swiglu(t[0], false); },
                 [](const auto& t) { return kernels::swiglu_reference(t[0]); },
                 {torch::randn({S, 2 * F}, f32).to(dt) * 3},
                 {"h"},
                 torch::randn({S, F}, f32)});
  out.back().backend = kernels::cuda_kernels_take(out.back().inputs[0]) ? "cuda" : "aten";
  // Per-cell text: Wan's text keys [R, 512, D] gathered to 21 frames (a few rows, each named by several frames).
  const int64_t Rt = real ? 4 : 3, Lt = real ? 512 : 5, Nc = real ? 21 : 7;
  const auto ids = torch::arange(Nc, f32.dtype(torch::kInt64)).remainder(Rt);
  out.push_back({"gather_rows",
                 "rows [" + std::to_string(Rt) + ", " + std::to_string(Lt) + ", " + std::to_string(D) + "] ids [" +
                     std::to_string(Nc) + "]",
                 [](const auto& t) { return kernels::fused_gather_rows(t[0], t[1], false); },
                 [](const auto& t) { return t[0].index_select(0, t[1]); },
                 {torch::randn({Rt, Lt, D}, f32).to(dt), ids},
                 {"rows"},
                 torch::randn({Nc, Lt, D}, f32)});
  out.back().backend = kernels::cuda_kernels_take(out.back().inputs[0]) ? "cuda" : "aten";
  return out;
}

std::string fmt(const char* f, double a, double b, double c, double d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

}  // namespace

void KernelBenchConfig::validate() const {
  resolve_device(device);  // no GPU for cuda: an error with what to do instead (--device cpu --shapes small here)
  VDT_CHECK(shapes == "real" || shapes == "small", "--shapes: expected real or small, got '", shapes, "'");
  VDT_CHECK(iters > 0 && warmup >= 0, "--iters must be > 0 and --warmup >= 0");
  std::stringstream ss(dtypes);
  for (std::string d; std::getline(ss, d, ',');)
    VDT_CHECK(d == "bf16" || d == "fp32", "--dtypes: expected a comma-separated list of bf16 and fp32, got '", d, "'");
}

const std::vector<ConfigField<KernelBenchConfig>>& KernelBenchConfig::fields() {
  using C = KernelBenchConfig;
  static const std::vector<ConfigField<C>> f = {
      device_field(&C::device),
      {"--shapes", "real (Wan 5B: L 8190 D 3072; H3: S 12686 D 5120) or small (the CPU: --device cpu --shapes small)",
       &C::shapes},
      {"--dtypes", "comma-separated: bf16, fp32", &C::dtypes},
      {"--iters", "timed fwd+bwd passes per path", &C::iters},
      {"--warmup", "untimed passes per path", &C::warmup},
  };
  return f;
}

bool KernelCheck::pass() const {
  for (const auto& t : tensors)
    if (!t.pass) return false;
  return !tensors.empty();
}

std::vector<KernelCheck> run_kernel_bench(const KernelBenchConfig& cfg, void (*print)(const std::string&)) {
  cfg.validate();
  const kernels::FusedKernelsScope fused(true);
  std::vector<KernelCheck> results;
  std::stringstream ss(cfg.dtypes);
  for (std::string dname; std::getline(ss, dname, ',');) {
    const auto dt = dname == "bf16" ? torch::kBFloat16 : torch::kFloat32;
    // Tolerances of fused vs reference (max error over max |reference|): a bf16 rounding of the output; gradients
    // that the reference rounds to bf16 on the way (and sums in bf16 for H3's bf16 AdaLN rows). A tensor also passes
    // when the fused op is no further from the float64 truth than 1.5x the reference is.
    const double out_tol = dt == torch::kFloat32 ? 1e-5 : 8e-3, grad_tol = dt == torch::kFloat32 ? 1e-4 : 5e-2;
    for (const auto& c : cases(cfg, dt)) {
      KernelCheck k;
      k.op = c.name, k.dtype = dname, k.shape = c.shape;
      k.backend = c.backend.empty() ? kernels::fused_backend(c.inputs[0], c.inputs[1]) : c.backend;
      const auto f = outputs(c, c.fused), r = outputs(c, c.reference),
                 truth = outputs(c, c.truth ? c.truth : c.reference, torch::kFloat64);
      const double otol = c.out_tol > 0 ? c.out_tol : out_tol, gtol = c.grad_tol > 0 ? c.grad_tol : grad_tol;
      for (size_t i = 0; i < f.size(); ++i) {
        KernelCheck::Checked t;
        t.name = i == 0 ? "out" : "d" + c.names[i - 1];
        t.max_abs = max_abs(f[i], r[i]), t.max_rel = max_rel(f[i], r[i]);
        t.fused_vs_truth = max_rel(f[i], truth[i]), t.ref_vs_truth = max_rel(r[i], truth[i]);
        t.pass = f[i].scalar_type() == r[i].scalar_type() && f[i].sizes() == r[i].sizes() &&
                 (t.max_rel <= (i == 0 ? otol : gtol) || t.fused_vs_truth <= 1.5 * t.ref_vs_truth + 1e-7);
        k.tensors.push_back(t);
        if (print)
          print("  " + c.name + " " + dname + " " + t.name +
                fmt(" max_abs=%.3e max_rel=%.3e fused_vs_f64=%.3e ref_vs_f64=%.3e", t.max_abs, t.max_rel,
                    t.fused_vs_truth, t.ref_vs_truth) +
                (t.pass ? "  PASS" : "  FAIL"));
      }
      k.fused_ms = time_ms(c, c.fused, cfg.warmup, cfg.iters);
      k.reference_ms = time_ms(c, c.timed_reference ? c.timed_reference : c.reference, cfg.warmup, cfg.iters);
      if (print)
        print("kernel op=" + c.name + " dtype=" + dname + " backend=" + k.backend + " shape=\"" + c.shape + "\"" +
              fmt(" fused_ms=%.3f reference_ms=%.3f speedup=%.2f", k.fused_ms, k.reference_ms,
                  k.reference_ms / std::max(k.fused_ms, 1e-9), 0) +
              (k.pass() ? " PASS" : " FAIL"));
      results.push_back(k);
    }
  }
  return results;
}

}  // namespace vdt
