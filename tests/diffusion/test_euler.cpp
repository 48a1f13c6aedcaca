#include <torch/torch.h>

#include "diffusion/euler.h"
#include "test_util.h"

namespace vdt {
namespace {

// With the exact velocity of a straight flow (noise - x0), Euler lands on x0 whatever the grid.
TEST(Euler, ExactVelocityRecoversTheCleanLatentAndKeepsFrameZero) {
  auto x0 = torch::randn({1, 4, 3, 2, 2}), noise = torch::randn({1, 4, 3, 2, 2});
  VelocityFn oracle = [&](const torch::Tensor& x, const torch::Tensor& t) {
    EXPECT_EQ(t[0][0].item<float>(), 0.0f);  // frame 0 sees timestep 0
    return noise - x0;
  };
  for (double shift : {1.0, 5.0}) {
    EulerConfig c;
    c.steps = 7, c.shift = shift;
    auto x = euler_sample(oracle, {}, noise, x0.slice(2, 0, 1), c);
    EXPECT_LT((x - x0).abs().max().item<double>(), 1e-5);
  }
}

TEST(Euler, GuidanceCombinesBranches) {
  auto x0 = torch::zeros({1, 1, 2, 1, 1}), noise = torch::ones({1, 1, 2, 1, 1});
  VelocityFn pos = [](const torch::Tensor& x, const torch::Tensor&) { return torch::full_like(x, 2.0); };
  VelocityFn neg = [](const torch::Tensor& x, const torch::Tensor&) { return torch::full_like(x, 1.0); };
  EulerConfig c;
  c.steps = 4, c.cfg_scale = 3.0, c.first_frame_cond = false;
  // v = 1 + 3 (2 - 1) = 4 over sigma 1 -> 0: x = 1 - 4 = -3
  auto x = euler_sample(pos, neg, noise, {}, c);
  EXPECT_NEAR(x.flatten()[1].item<double>(), -3.0, 1e-5);
}

}  // namespace
}  // namespace vdt
