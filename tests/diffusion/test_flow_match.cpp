#include <torch/torch.h>

#include "core/safetensors.h"
#include "diffusion/flow_match.h"
#include "test_util.h"

namespace vdt {
namespace {

double max_abs(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(FlowMatch, GridsAndWeightsMatchReferenceFixture) {
  auto f = SafetensorsFile::open(test::fixture("flow_match_wan.safetensors"));
  const auto grid = training_grid();
  EXPECT_LT(max_abs(grid.timesteps, f->get("train.timesteps")), 1e-4);
  EXPECT_LT(max_abs(grid.sigmas, f->get("train.sigmas")), 1e-7);
  const auto w = training_weights(grid);
  EXPECT_LT(max_abs(w, f->get("train.weights")), 1e-5);
  EXPECT_NEAR(w.mean().item<double>(), 1.0, 1e-5);
  const auto g50 = inference_grid(50, 5.0);
  EXPECT_LT(max_abs(g50.timesteps, f->get("infer50.timesteps")), 1e-4);
  EXPECT_LT(max_abs(g50.sigmas, f->get("infer50.sigmas")), 1e-7);
  const auto g30 = inference_grid(30, 3.0, 0.7);
  EXPECT_LT(max_abs(g30.timesteps, f->get("infer30_strength0.7_shift3.timesteps")), 1e-4);
  EXPECT_LT(max_abs(g30.sigmas, f->get("infer30_strength0.7_shift3.sigmas")), 1e-7);
}

TEST(FlowMatch, SftExampleRoundsTimestepToBf16AndKeepsFrameZeroClean) {
  const auto grid = training_grid();
  const auto w = training_weights(grid);
  auto x0 = torch::randn({1, 4, 3, 2, 2}), noise = torch::randn({1, 4, 3, 2, 2});
  // wan_spec §4.4: id 10 (t = 997.98) becomes tau = 996 in bf16 -> nearest id 20.
  auto ex = make_sft_example(x0, noise, 10, grid, w, torch::kBFloat16, true);
  EXPECT_EQ(ex.timestep, 996.0);
  EXPECT_NEAR(ex.sigma, grid.sigmas[20].item<double>(), 1e-9);
  EXPECT_NEAR(ex.weight, w[20].item<double>(), 1e-9);
  EXPECT_TRUE(torch::equal(ex.x_t.select(2, 0), x0.select(2, 0)));
  EXPECT_EQ(ex.t[0][0].item<float>(), 0.0f);
  EXPECT_EQ(ex.t[0][2].item<float>(), 996.0f);
  EXPECT_LT(max_abs(ex.x_t.slice(2, 1), (1 - ex.sigma) * x0.slice(2, 1) + ex.sigma * noise.slice(2, 1)), 1e-6);
  EXPECT_TRUE(torch::equal(ex.target, noise - x0));
  // Ids 0..9 all round to tau = 1000 -> weight 0.
  for (int id = 0; id < 10; ++id) EXPECT_EQ(make_sft_example(x0, noise, id, grid, w, torch::kBFloat16, true).weight, 0.0);
  // In float32 the timestep is kept.
  EXPECT_NEAR(make_sft_example(x0, noise, 10, grid, w, torch::kFloat32, false).timestep, 997.98, 0.01);
}

TEST(FlowMatch, MseSkipsFrameZeroUnderFirstFrameConditioning) {
  auto p = torch::zeros({1, 2, 3, 2, 2}), t = torch::zeros({1, 2, 3, 2, 2});
  t.select(2, 0).fill_(10);
  EXPECT_EQ(flow_mse(p, t, true).item<double>(), 0.0);
  EXPECT_NEAR(flow_mse(p, t, false).item<double>(), 100.0 / 3, 1e-4);
}

}  // namespace
}  // namespace vdt
