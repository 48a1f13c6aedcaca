// Fused elementwise ops (model/kernels/fused_ops.h) against their autograd references (reference_ops.h): forward and
// every gradient, fp32 tight and bf16 loose, odd widths (D not a multiple of the vector width), G > 1, H3 rows with
// repeats, frozen operands. On CPU this is the ATen fallback; on a CUDA build with a GPU the same checks run the CUDA
// kernels (FusedPath::automatic) and are skipped elsewhere.
#include <torch/torch.h>

#include <functional>

#include "model/block.h"
#include "model/h3/h3_block.h"
#include "model/kernels/fused_ops.h"
#include "model/kernels/reference_ops.h"
#include "model/wan_dit.h"
#include "test_util.h"

namespace vdt::kernels {
namespace {

using Op = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// The output and the gradients of the inputs marked in `want` (undefined where not wanted) for the upstream gradient
// `go` (float32, cast to the output's dtype), on fresh leaves.
std::vector<torch::Tensor> run(const Op& op, const std::vector<torch::Tensor>& in, const std::vector<bool>& want,
                               const torch::Tensor& go) {
  std::vector<torch::Tensor> leaves;
  for (size_t i = 0; i < in.size(); ++i) leaves.push_back(in[i].detach().clone().requires_grad_(want[i]));
  auto out = op(leaves);
  out.backward(go.to(out.scalar_type()));
  std::vector<torch::Tensor> r{out.detach()};
  for (size_t i = 0; i < in.size(); ++i) r.push_back(want[i] ? leaves[i].grad() : torch::Tensor());
  return r;
}

double rel_max(const torch::Tensor& a, const torch::Tensor& ref) {
  const auto r = ref.to(torch::kFloat64);
  return (a.to(torch::kFloat64) - r).abs().max().item<double>() / std::max(r.abs().max().item<double>(), 1e-12);
}

// Compares fused and reference, output and each wanted gradient; dtypes must match too.
void expect_match(const Op& fused, const Op& ref, const std::vector<torch::Tensor>& in, const std::vector<bool>& want,
                  const torch::Tensor& go, double out_tol, double grad_tol, const std::string& what) {
  const auto f = run(fused, in, want, go), r = run(ref, in, want, go);
  for (size_t i = 0; i < f.size(); ++i) {
    SCOPED_TRACE(what + (i == 0 ? " output" : " grad of input " + std::to_string(i - 1)));
    ASSERT_EQ(f[i].defined(), r[i].defined());
    if (!r[i].defined()) continue;
    EXPECT_EQ(f[i].scalar_type(), r[i].scalar_type());
    ASSERT_EQ(f[i].sizes(), r[i].sizes());
    EXPECT_LE(rel_max(f[i], r[i]), i == 0 ? out_tol : grad_tol);
  }
}

struct Setting {
  torch::Device device;
  FusedPath path;
};

std::vector<Setting> settings_to_run() {
  std::vector<Setting> s{{torch::kCPU, FusedPath::aten}};
  if (cuda_kernels_built() && torch::cuda::is_available())
    s.push_back({torch::Device(torch::kCUDA, 0), FusedPath::automatic});
  return s;
}

// fp32: the fallback's forward is the reference's ops (exactly equal on CPU); gradients differ by summation order.
// bf16: the reference rounds intermediate gradients to bf16, the fused op does not.
double out_tol(torch::ScalarType dt, const Setting& s) {
  if (dt == torch::kFloat32) return s.device.is_cpu() ? 0.0 : 1e-6;
  return s.device.is_cpu() ? 0.0 : 8e-3;  // CUDA: LayerNorm statistics in another order may flip a bf16 rounding
}
double grad_tol(torch::ScalarType dt) { return dt == torch::kFloat32 ? 2e-6 : 3e-2; }

TEST(FusedOps, ModulatedNormMatchesReference) {
  torch::manual_seed(0);
  for (const auto& s : settings_to_run())
    for (auto dt : {torch::kFloat32, torch::kBFloat16})
      for (auto [B, L, D, G] : {std::array<int64_t, 4>{2, 12, 37, 1},
                                {2, 12, 37, 3},
                                {1, 6, 64, 6},
                                {3, 10, 24, 2},
                                {1, 200, 64, 2},     // CUDA: several chunks per group
                                {1, 4, 1031, 2}}) {  // CUDA: odd rows too wide for the chunk kernel (the fallback)
        const auto f32 = torch::TensorOptions().device(s.device).dtype(torch::kFloat32);
        const auto x = (torch::randn({B, L, D}, f32) * 3 + 0.5).to(dt);
        const auto shift = torch::randn({B, G, 1, D}, f32), scale = torch::randn({B, G, 1, D}, f32) * 0.5;
        const auto go = torch::randn({B, L, D}, f32);
        const Op fused = [&](const auto& t) { return fused_modulated_norm(t[0], t[1], t[2], 1e-6, s.path); };
        const Op ref = [](const auto& t) { return reference_modulated_norm(t[0], t[1], t[2], 1e-6); };
        for (auto want : {std::vector<bool>{true, true, true}, {true, false, false}, {false, true, true}}) {
          const auto what = std::string(s.device.str()) + " " + c10::toString(dt) + " B" + std::to_string(B) + " L" +
                            std::to_string(L) + " D" + std::to_string(D) + " G" + std::to_string(G) + " want x " +
                            std::to_string(want[0]);
          expect_match(fused, ref, {x, shift, scale}, want, go, out_tol(dt, s), grad_tol(dt), what);
        }
      }
}

// The branch form as the blocks use it: x goes on to a residual op (here x * w), and the one node adds that branch's
// gradient of x into the norm's dx.
TEST(FusedOps, ModulatedNormBranchAddsTheResidualGradient) {
  torch::manual_seed(3);
  for (const auto& s : settings_to_run())
    for (auto dt : {torch::kFloat32, torch::kBFloat16})
      for (auto [B, L, D, G] :
           {std::array<int64_t, 4>{2, 12, 37, 3}, {1, 6, 64, 6}, {1, 200, 64, 2}, {1, 4, 1031, 2}}) {
        const auto f32 = torch::TensorOptions().device(s.device).dtype(torch::kFloat32);
        const auto x = (torch::randn({B, L, D}, f32) * 3 + 0.5).to(dt), w = torch::randn({B, L, D}, f32).to(dt);
        const auto shift = torch::randn({B, G, 1, D}, f32), scale = torch::randn({B, G, 1, D}, f32) * 0.5;
        const auto go = torch::randn({B, L, D}, f32);
        const Op fused = [&](const auto& t) {
          auto [x_res, h] = fused_modulated_norm_branch(t[0], t[1], t[2], 1e-6, s.path);
          return h + x_res * w;
        };
        const Op ref = [&](const auto& t) { return reference_modulated_norm(t[0], t[1], t[2], 1e-6) + t[0] * w; };
        for (auto want : {std::vector<bool>{true, true, true}, {true, false, false}, {false, true, true}}) {
          const auto what = std::string(s.device.str()) + " " + c10::toString(dt) + " L" + std::to_string(L) + " D" +
                            std::to_string(D) + " G" + std::to_string(G) + " want x " + std::to_string(want[0]);
          expect_match(fused, ref, {x, shift, scale}, want, go, out_tol(dt, s), grad_tol(dt), what);
        }
      }
}

// norm3: the affine LayerNorm's branch form against torch::layer_norm and a plain fork, weight and bias learned or
// frozen; x * w stands for the residual add.
TEST(FusedOps, LayerNormBranchMatchesTorchLayerNorm) {
  torch::manual_seed(4);
  for (const auto& s : settings_to_run())
    for (auto dt : {torch::kFloat32, torch::kBFloat16})
      for (auto [B, L, D] : {std::array<int64_t, 3>{2, 12, 37}, {1, 200, 64}, {3, 10, 24}, {1, 4, 1031}}) {
        const auto f32 = torch::TensorOptions().device(s.device).dtype(torch::kFloat32);
        const auto x = (torch::randn({B, L, D}, f32) * 3 + 0.5).to(dt), w = torch::randn({B, L, D}, f32).to(dt);
        const auto weight = (1 + torch::randn({D}, f32) * 0.3).to(dt), bias = (torch::randn({D}, f32) * 0.3).to(dt);
        const auto go = torch::randn({B, L, D}, f32);
        const Op fused = [&](const auto& t) {
          auto [x_res, h] = fused_layer_norm_branch(t[0], t[1], t[2], 1e-6, s.path);
          return h + x_res * w;
        };
        const Op ref = [&](const auto& t) { return torch::layer_norm(t[0], {D}, t[1], t[2], 1e-6) + t[0] * w; };
        for (auto want : {std::vector<bool>{true, true, true}, {true, false, false}, {false, true, true}}) {
          const auto what = std::string(s.device.str()) + " " + c10::toString(dt) + " L" + std::to_string(L) + " D" +
                            std::to_string(D) + " want x " + std::to_string(want[0]);
          // the forward is ATen's; the CUDA backward sums in another order (and adds before the rounding)
          expect_match(fused, ref, {x, weight, bias}, want, go, 0.0, s.device.is_cpu() ? 0.0 : grad_tol(dt), what);
        }
      }
}

TEST(FusedOps, GatedAddMatchesReference) {
  torch::manual_seed(1);
  for (const auto& s : settings_to_run())
    for (auto dt : {torch::kFloat32, torch::kBFloat16})
      for (auto [B, L, D, G] :
           {std::array<int64_t, 4>{2, 12, 37, 1}, {2, 12, 37, 4}, {1, 8, 64, 8}, {1, 200, 64, 2}, {1, 4, 1031, 2}}) {
        const auto f32 = torch::TensorOptions().device(s.device).dtype(torch::kFloat32);
        const auto x = torch::randn({B, L, D}, f32).to(dt), y = torch::randn({B, L, D}, f32).to(dt);
        const auto gate = torch::randn({B, G, 1, D}, f32);
        const auto go = torch::randn({B, L, D}, f32);
        const Op fused = [&](const auto& t) { return fused_gated_add(t[0], t[1], t[2], s.path); };
        const Op ref = [](const auto& t) { return reference_gated_add(t[0], t[1], t[2]); };
        for (auto want : {std::vector<bool>{true, true, true}, {true, true, false}, {false, false, true}}) {
          const auto what = std::string(s.device.str()) + " " + c10::toString(dt) + " D" + std::to_string(D) + " G" +
                            std::to_string(G);
          expect_match(fused, ref, {x, y, gate}, want, go, out_tol(dt, s) == 0 ? 0 : 1e-6, grad_tol(dt), what);
        }
      }
}

// H3: modulation rows in x's dtype (the release's bf16 AdaLN) or float32; rows with repeats, some rows unused.
TEST(FusedOps, H3ModulateAndGateMatchReference) {
  torch::manual_seed(2);
  for (const auto& s : settings_to_run())
    for (auto [dt, mod_dt] : {std::pair{torch::kFloat32, torch::kFloat32},
                              {torch::kBFloat16, torch::kBFloat16},
                              {torch::kBFloat16, torch::kFloat32}})
      for (auto [S, D, R] : {std::array<int64_t, 3>{29, 37, 6}, {40, 64, 3}, {7, 24, 9}}) {
        const auto f32 = torch::TensorOptions().device(s.device).dtype(torch::kFloat32);
        const auto x = torch::randn({S, D}, f32).to(dt), y = torch::randn({S, D}, f32).to(dt);
        const auto shift = torch::randn({R, D}, f32).to(mod_dt), scale = (torch::randn({R, D}, f32) * 0.5).to(mod_dt);
        const auto rows = torch::randint(0, R - 1, {S}, f32.dtype(torch::kInt64));  // row R-1 never used
        const auto go = torch::randn({S, D}, f32);
        const auto what = std::string(s.device.str()) + " " + c10::toString(dt) + "/" + c10::toString(mod_dt) + " S" +
                          std::to_string(S) + " D" + std::to_string(D) + " R" + std::to_string(R);
        const Op fmod = [&](const auto& t) { return fused_h3_modulate(t[0], t[1], t[2], t[3], s.path); };
        const Op rmod = [](const auto& t) { return reference_h3_modulate(t[0], t[1], t[2], t[3]); };
        const Op fgate = [&](const auto& t) { return fused_h3_gate(t[0], t[1], t[2], t[3], s.path); };
        const Op rgate = [](const auto& t) { return reference_h3_gate(t[0], t[1], t[2], t[3]); };
        // The reference sums the bf16 rows' gradients in bf16 (index_select's backward); the fused op in float32.
        const double gt = mod_dt == torch::kBFloat16 ? 5e-2 : grad_tol(dt);
        for (auto want :
             {std::vector<bool>{true, true, true, false}, {true, false, false, false}, {false, true, true, false}}) {
          expect_match(fmod, rmod, {x, shift, scale, rows}, want, go, s.device.is_cpu() ? 0 : 1e-6, gt, what + " mod");
          expect_match(fgate, rgate, {x, shift, y, rows}, want, go, s.device.is_cpu() ? 0 : 1e-6, gt, what + " gate");
        }
      }
}

// The backward is the hand-written one (a custom node), and the switch routes the blocks' functions.
TEST(FusedOps, SwitchRoutesTheBlocksFunctions) {
  const auto x = torch::randn({1, 4, 8}, torch::requires_grad()),
             mod = torch::randn({1, 1, 1, 8}, torch::requires_grad());
  const auto rows = torch::zeros({4}, torch::kInt64);
  const auto x2 = torch::randn({4, 8}, torch::requires_grad()), mod2 = torch::randn({1, 8}, torch::requires_grad());
  set_fused_kernels(true);
  EXPECT_NE(vdt::modulated_norm(x, mod, mod, 1e-6).grad_fn()->name().find("ModulatedNormFn"), std::string::npos);
  {
    auto [x_res, h] = modulated_norm_branch(x, mod, mod, 1e-6);  // both outputs from the one node
    EXPECT_EQ(x_res.grad_fn().get(), h.grad_fn().get());
    EXPECT_NE(h.grad_fn()->name().find("ModulatedNormFn"), std::string::npos);
    EXPECT_TRUE(torch::equal(x_res, x));
    const auto w = torch::ones({8}, torch::requires_grad());
    auto [x_res3, h3] = layer_norm_branch(x, w, w, 1e-6);
    EXPECT_EQ(x_res3.grad_fn().get(), h3.grad_fn().get());
    EXPECT_NE(h3.grad_fn()->name().find("LayerNormFn"), std::string::npos);
  }
  EXPECT_NE(vdt::gated_add(x, x, mod).grad_fn()->name().find("GatedAddFn"), std::string::npos);
  EXPECT_NE(vdt::h3_modulate(x2, mod2, mod2, rows).grad_fn()->name().find("H3ModulateFn"), std::string::npos);
  EXPECT_NE(vdt::h3_gate(x2, mod2, x2, rows).grad_fn()->name().find("H3GateFn"), std::string::npos);
  set_fused_kernels(false);
  EXPECT_EQ(vdt::modulated_norm(x, mod, mod, 1e-6).grad_fn()->name().find("ModulatedNormFn"), std::string::npos);
  EXPECT_TRUE(modulated_norm_branch(x, mod, mod, 1e-6).first.is_same(x));
  EXPECT_EQ(vdt::h3_gate(x2, mod2, x2, rows).grad_fn()->name().find("H3GateFn"), std::string::npos);
  set_fused_kernels(true);
}

TEST(FusedOps, BadShapesNameWhatWasExpected) {
  const auto x = torch::randn({2, 6, 8});
  try {
    fused_modulated_norm(x, torch::zeros({2, 4, 1, 8}), torch::zeros({2, 4, 1, 8}), 1e-6);  // 4 does not divide 6
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("modulated_norm: expected x [B, L, D] and shift [B, G, 1, D] with G dividing L"),
        std::string::npos)
        << e.what();
  }
  try {
    fused_h3_gate(torch::randn({5, 8}), torch::zeros({2, 8}), torch::randn({5, 8}), torch::zeros({5}, torch::kInt32));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows [S] int64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fused_gated_add(x, torch::randn({2, 6, 8}, torch::kFloat64), torch::zeros({2, 1, 1, 8})), c10::Error);
}

// A whole tiny Wan DiT, forward and backward: fused and reference agree on the output and every parameter gradient.
TEST(FusedOps, WanDiTGradientsEqualReferencePath) {
  torch::manual_seed(0);
  WanDiT model{preset_config("tiny")};
  model->init_weights(1);
  {
    torch::NoGradGuard ng;
    model->head->head->weight.normal_(0, 0.05);
  }
  const auto x = torch::randn({2, 16, 3, 4, 6}), ctx = torch::randn({2, 7, 64});
  const auto t = torch::tensor({{0.0, 700.0, 700.0}, {0.0, 250.0, 250.0}});  // G = F: frame 0 at t = 0
  auto pass = [&](bool fused) {
    set_fused_kernels(fused);
    model->zero_grad();
    auto out = model->forward({x, t, ctx});
    (out * out).mean().backward();
    std::vector<torch::Tensor> g{out.detach()};
    for (const auto& p : model->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    return g;
  };
  const auto ref = pass(false), fused = pass(true);
  set_fused_kernels(true);
  ASSERT_EQ(ref.size(), fused.size());
  EXPECT_LE(rel_max(fused[0], ref[0]), 1e-6);
  for (size_t i = 1; i < ref.size(); ++i) EXPECT_LE(rel_max(fused[i], ref[i]), 1e-4) << "parameter " << i - 1;
}

}  // namespace
}  // namespace vdt::kernels
