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

}  // namespace
}  // namespace vdt
