#include <torch/torch.h>

#include <algorithm>

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

// A side stream (H3's audio, steps on the last axis, uneven chunks) rides along: the callback sees its finished
// chunks clean and the current chunk's steps noisy, an oracle that knows both clean streams recovers them, and the
// video comes out as without the side stream.
TEST(Euler, CausalSideStreamIsSampledWithItsChunk) {
  torch::manual_seed(4);
  const SideBounds bounds = {{"audio", {0, 3, 5, 9}}};
  SampleState x0{torch::randn({1, 2, 6, 2, 2}), {{"audio", torch::randn({1, 2, 3, 9})}}};
  SampleState noise{torch::randn({1, 2, 6, 2, 2}), {{"audio", torch::randn({1, 2, 3, 9})}}};
  StateVelocityFn oracle = [&](const SampleState& x, const torch::Tensor& t) {
    const int64_t f = x.video.size(2), k = f / 2 - 1;  // chunk k being sampled
    const auto& a = x.side.at("audio");
    const int64_t done = bounds.at("audio")[static_cast<size_t>(k)];
    EXPECT_EQ(a.size(-1), bounds.at("audio")[static_cast<size_t>(k + 1)]);
    if (done > 0)  // the finished chunks' steps: clean
      EXPECT_LT((a.narrow(-1, 0, done) - x0.side.at("audio").narrow(-1, 0, done)).abs().max().item<double>(), 1e-4);
    const double sigma = std::max(t[0][f - 1].item<double>() / 1000.0, 1e-6);
    auto sig = (t / 1000.0).clamp_min(1e-6).view({1, 1, f, 1, 1});
    SampleState v{(x.video - x0.video.narrow(2, 0, f)) / sig, {}};
    auto va = torch::zeros_like(a);  // the finished steps: velocity ignored by the sampler
    va.narrow(-1, done, a.size(-1) - done)
        .copy_((a.narrow(-1, done, a.size(-1) - done) - x0.side.at("audio").narrow(-1, done, a.size(-1) - done)) /
               sigma);
    v.side["audio"] = va;
    return v;
  };
  EulerConfig c;
  c.steps = 5, c.cfg_scale = 1.0, c.first_frame_cond = false;
  const auto x = causal_euler_sample(oracle, {}, noise, bounds, {}, 2, c);
  EXPECT_LT((x.video - x0.video).abs().max().item<double>(), 1e-4);
  EXPECT_LT((x.side.at("audio") - x0.side.at("audio")).abs().max().item<double>(), 1e-4);
  VelocityFn video_only = [&](const torch::Tensor& xv, const torch::Tensor& t) {
    return oracle(SampleState{xv,
                              {{"audio", x0.side.at("audio").narrow(
                                             -1, 0, bounds.at("audio")[static_cast<size_t>(xv.size(2) / 2)])}}},
                  t)
        .video;
  };
  EXPECT_TRUE(torch::equal(causal_euler_sample(video_only, {}, noise.video, {}, 2, c), x.video));
  // Bounds that do not cover the stream are refused.
  test::expect_error(
      [&] {
        causal_euler_sample(oracle, {}, noise, {{"audio", {0, 3, 9}}}, {}, 2, c);
      },
      {"side stream 'audio'", "3 chunks"});
}

}  // namespace
}  // namespace vdt
