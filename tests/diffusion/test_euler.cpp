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

// Chunk by chunk: the callback sees the sampled prefix clean at timestep 0 followed by the current chunk; an oracle
// that knows the clean frames recovers them all; chunk 0 comes out the same whether 1 or 3 chunks are sampled.
TEST(Euler, CausalChunkByChunkUsesTheCleanPrefix) {
  torch::manual_seed(3);
  auto x0 = torch::randn({1, 2, 6, 2, 2}), noise = torch::randn({1, 2, 6, 2, 2});
  int64_t calls = 0;
  VelocityFn oracle = [&](const torch::Tensor& x, const torch::Tensor& t) {  // v = (x_t - x0) / sigma per frame
    ++calls;
    const int64_t f = x.size(2);
    EXPECT_EQ(f % 2, 0);
    EXPECT_EQ(t.size(1), f);
    if (f > 2) {  // the prefix: clean, timestep 0
      EXPECT_EQ(t.narrow(1, 0, f - 2).abs().max().item<double>(), 0.0);
      EXPECT_LT((x.narrow(2, 0, f - 2) - x0.narrow(2, 0, f - 2)).abs().max().item<double>(), 1e-4);
    }
    auto sig = (t / 1000.0).clamp_min(1e-6).view({1, 1, f, 1, 1});
    return (x - x0.narrow(2, 0, f)) / sig;
  };
  EulerConfig c;
  c.steps = 5, c.cfg_scale = 1.0, c.first_frame_cond = false;
  auto x = causal_euler_sample(oracle, {}, noise, {}, 2, c);
  EXPECT_EQ(calls, 3 * 5);
  EXPECT_LT((x - x0).abs().max().item<double>(), 1e-4);
  auto one = causal_euler_sample(oracle, {}, noise.narrow(2, 0, 2), {}, 2, c);
  EXPECT_TRUE(torch::allclose(one, x.narrow(2, 0, 2), 0, 0));
}

}  // namespace
}  // namespace vdt
