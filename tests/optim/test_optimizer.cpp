#include <torch/torch.h>

#include "test_util.h"
#include "optim/optimizer.h"

namespace vdt {
namespace {

std::vector<torch::Tensor> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({5, 7}).requires_grad_(), torch::randn({3}).requires_grad_()};
}

void set_grads(std::vector<torch::Tensor>& ps, int step) {
  torch::manual_seed(100 + step);
  for (auto& p : ps) p.mutable_grad() = torch::randn_like(p);
}

// Fused multi-tensor path == slow reference path == LibTorch's own torch::optim::AdamW, over several steps.
TEST(AdamW, FusedEqualsReferenceEqualsLibTorch) {
  auto a = make_params(1), b = make_params(1), c = make_params(1);
  AdamW fused({{"g", a, 1e-2, 0.1}}, {.fused = true});
  AdamW ref({{"g", b, 1e-2, 0.1}}, {.fused = false});
  torch::optim::AdamW lib(c, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  for (int s = 0; s < 5; ++s) {
    set_grads(a, s), set_grads(b, s), set_grads(c, s);
    fused.step(), ref.step(), lib.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 1e-6);
    EXPECT_LT((b[i] - c[i]).abs().max().item<double>(), 1e-6);
  }
  EXPECT_GT((a[0] - make_params(1)[0]).abs().max().item<double>(), 1e-3);  // it moved
}

TEST(AdamW, GroupsKeepTheirOwnLearningRates) {
  auto a = make_params(2), b = make_params(2);
  AdamW opt({{"slow", {a[0]}, 1e-4, 0.0}, {"fast", {a[1]}, 1e-1, 0.0}}, {});
  set_grads(a, 0);
  opt.step();
  // First AdamW step moves every element by ~lr (m/sqrt(v) = sign(g)).
  EXPECT_NEAR((a[0] - b[0]).abs().mean().item<double>(), 1e-4, 1e-5);
  EXPECT_NEAR((a[1] - b[1]).abs().mean().item<double>(), 1e-1, 1e-2);
}

TEST(ClipGradNorm, ReturnsPreClipNormAndScales) {
  auto ps = make_params(3);
  set_grads(ps, 0);
  double expect = 0;
  for (auto& p : ps) expect += p.grad().pow(2).sum().item<double>();
  expect = std::sqrt(expect);
  auto n = clip_grad_norm(ps, 1.0);
  EXPECT_NEAR(n.item<double>(), expect, 1e-4);
  double after = 0;
  for (auto& p : ps) after += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-4);
}

// The total from one buffer (what ATen's CUDA _foreach_norm returns) is taken without a copy; scalars in separate
// buffers, out of order or of mixed dtypes are not (grad_norm stacks them); both give the same norm; bf16 gradients'
// norms are summed in float32.
TEST(ClipGradNorm, ConsecutiveScalarsAndTheStackAgree) {
  const auto buf = torch::tensor({3.0f, 4.0f, 12.0f, 84.0f});
  std::vector<torch::Tensor> views, apart;
  for (int64_t i = 1; i < 4; ++i) views.push_back(buf[i]), apart.push_back(buf[i].clone());
  const auto v = consecutive_scalars(views);
  ASSERT_TRUE(v.defined());
  EXPECT_EQ(v.data_ptr(), buf[1].data_ptr());
  EXPECT_TRUE(torch::equal(v, torch::stack(views)));
  EXPECT_EQ(v.norm().item<float>(), torch::stack(apart).norm().item<float>());  // 85
  EXPECT_FALSE(consecutive_scalars(apart).defined());
  EXPECT_FALSE(consecutive_scalars({buf[2], buf[1]}).defined());
  EXPECT_FALSE(consecutive_scalars({buf[0], buf[1].to(torch::kFloat64)}).defined());
  EXPECT_FALSE(consecutive_scalars({}).defined());
  auto p = torch::zeros({3}, torch::kBFloat16).requires_grad_();
  p.mutable_grad() = torch::full({3}, 300.0, torch::kBFloat16);  // each square and the sum exact in float32
  EXPECT_EQ(grad_norm({p}).scalar_type(), torch::kFloat32);
  EXPECT_NEAR(grad_norm({p}).item<double>(), 300.0 * std::sqrt(3.0), 1e-3);
}

// Clipping inside the update (grad_scale = the clip coefficient, what GradSync::step does) moves the weights as
// clipping the gradients first and stepping without a scale, on the fused and on the reference path.
TEST(AdamW, GradScaleEqualsClippingFirst) {
  for (bool fused : {true, false}) {
    auto a = make_params(3), b = make_params(3);
    AdamW scaled({{"g", a, 1e-2, 0.1}}, {.fused = fused});
    AdamW plain({{"g", b, 1e-2, 0.1}}, {.fused = fused});
    for (int s = 0; s < 4; ++s) {
      set_grads(a, s), set_grads(b, s);
      const auto norm = grad_norm(a);
      const auto coef = clip_coefficient(norm, 0.5);
      EXPECT_LT(coef.item<double>(), 1.0);  // the clip is active
      EXPECT_NEAR(clip_grad_norm(b, 0.5).item<double>(), norm.item<double>(), 1e-6);
      scaled.step({}, coef), plain.step();
    }
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 1e-6) << (fused ? "fused" : "reference");
  }
}

// vdt's CUDA kernel (optim/adamw_cuda.h) against at::_fused_adamw_ and the reference path, over the dtype pairs it
// takes, lengths across several chunks and with a tail, a misaligned parameter (element path), the clip coefficient
// and a skipped step. Its gradients stay as they were.
TEST(AdamW, CudaKernelEqualsAtenFusedAndReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  for (auto [pdt, sdt] : {std::pair{torch::kFloat32, torch::kFloat32},
                          {torch::kBFloat16, torch::kBFloat16},
                          {torch::kFloat32, torch::kBFloat16},
                          {torch::kBFloat16, torch::kFloat32}}) {
    const auto make = [&] {
      torch::manual_seed(7);
      const auto o = torch::TensorOptions().device(dev).dtype(pdt);
      return std::vector<torch::Tensor>{torch::randn({40000}, o), torch::randn({3, 1001}, o), torch::randn({24}, o),
                                        torch::randn({4097}, o).narrow(0, 1, 4096)};  // misaligned by one element
    };
    auto own = make(), aten = make(), ref = make();
    const AdamWConfig base{.state_dtype = sdt};
    AdamWConfig aten_cfg = base, ref_cfg = base;
    aten_cfg.own_kernel = false, ref_cfg.fused = false;
    const std::vector<std::string> names{"a", "b", "c", "d"};
    AdamW a({{"g", own, 1e-2, 0.1, names}}, base), b({{"g", aten, 1e-2, 0.1, names}}, aten_cfg),
        c({{"g", ref, 1e-2, 0.1, names}}, ref_cfg);
    const auto f32 = torch::TensorOptions().device(dev).dtype(torch::kFloat32);
    for (int s = 0; s < 4; ++s) {
      torch::manual_seed(100 + s);
      std::vector<torch::Tensor> grads;
      for (auto& p : own) grads.push_back(torch::randn_like(p));
      for (size_t i = 0; i < own.size(); ++i) {
        own[i].mutable_grad() = grads[i].clone(), aten[i].mutable_grad() = grads[i].clone();
        ref[i].mutable_grad() = grads[i].clone();
      }
      const auto coef = torch::full({}, 0.5, f32);
      const auto inf = torch::full({}, s == 2 ? 1.0 : 0.0, f32);  // step 3 is skipped
      a.step(inf, coef), c.step(inf, coef);
      if (pdt == sdt) b.step(inf, coef);  // ATen's kernel takes one dtype for all
      for (size_t i = 0; i < own.size(); ++i) EXPECT_TRUE(torch::equal(own[i].grad(), grads[i])) << "gradient written";
    }
    // Error relative to the largest value: float32 agrees to float rounding (the ATen kernel multiplies by its betas
    // in double), bfloat16 to a flip of the last bit (2^-8..2^-7 of a value). ATen's kernel takes only one dtype.
    const double tol = pdt == torch::kFloat32 && sdt == torch::kFloat32 ? 1e-5 : 1e-2;
    const bool aten_takes = pdt == sdt;
    const auto rel = [](const torch::Tensor& x, const torch::Tensor& y) {
      const auto xf = x.to(torch::kFloat32), yf = y.to(torch::kFloat32);
      return ((xf - yf).abs().max() / yf.abs().max()).item<double>();
    };
    for (size_t i = 0; i < own.size(); ++i) {
      const auto what = std::string(c10::toString(pdt)) + "/" + c10::toString(sdt) + " param " + std::to_string(i);
      EXPECT_LE(rel(own[i], ref[i]), tol) << what;
      EXPECT_LE(rel(a.exp_avg()[0][i], c.exp_avg()[0][i]), tol) << what << " exp_avg";
      EXPECT_LE(rel(a.exp_avg_sq()[0][i], c.exp_avg_sq()[0][i]), tol) << what << " exp_avg_sq";
      if (aten_takes) {
        EXPECT_LE(rel(own[i], aten[i]), tol) << what << " vs ATen";
      }
    }
    for (const auto& st : a.state()) {
      if (st.first.rfind("step.", 0) == 0) {
        EXPECT_EQ(st.second.item<double>(), 3.0) << "skipped step counted";
      }
    }
  }
}

}  // namespace
}  // namespace vdt
