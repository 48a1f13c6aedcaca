// Diffusion forcing: the shifted noise-level distribution against its closed form, per-frame timesteps and noising
// per chunk, the clean first frame, and a loss that weights each chunk by the bell weight of its t.
#include <torch/torch.h>

#include <algorithm>

#include "core/rng.h"
#include "diffusion/forcing.h"
#include "test_util.h"

namespace vdt {
namespace {

// P(sigma <= x) for sigma = s u / (1 + (s-1) u), u ~ U(0,1): u <= x / (s - (s-1) x).
double sigma_cdf(double x, double s) { return x / (s - (s - 1) * x); }

TEST(Forcing, ShiftedLevelsFollowTheirDistribution) {
  const RngStream rng(7, 0x64666c76);
  std::vector<double> sig;
  for (uint64_t i = 0; i < 20000; ++i) sig.push_back(df_sigma(rng.uniform(i, 0), 3.0));
  std::sort(sig.begin(), sig.end());
  double ks = 0;  // Kolmogorov-Smirnov distance to the closed form
  for (size_t i = 0; i < sig.size(); ++i)
    ks = std::max(ks, std::abs(sigma_cdf(sig[i], 3.0) - (i + 0.5) / sig.size()));
  EXPECT_LT(ks, 0.015);  // the 1% critical value for n = 20000 is 0.0115; an unshifted U(0,1) gives ~0.17
  EXPECT_NEAR(df_sigma(0.5, 3.0), 0.75, 1e-12);
  EXPECT_EQ(df_sigma(0.0, 3.0), 0.0);
}

TEST(Forcing, ChunksGetTheirOwnLevelAndTheLossWeightsThem) {
  ForcingConfig cfg;
  cfg.chunks = 3, cfg.chunk_frames = 2, cfg.clean_first_frame = true;
  const auto grid = training_grid();
  const auto w = training_weights(grid);
  torch::manual_seed(0);
  const auto x0 = torch::randn({2, 4, 6, 3, 3}), noise = torch::randn_like(x0);
  const auto ex = make_df_example(x0, noise, {0.1, 0.5, 0.9}, cfg, grid, w);
  ASSERT_EQ(ex.t.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(ex.t[0][0].item<float>(), 0.0f);  // clean first frame
  EXPECT_TRUE(torch::equal(ex.x_t.narrow(2, 0, 1), x0.narrow(2, 0, 1)));
  for (int64_t f = 1; f < 6; ++f) {
    const double s = ex.sigmas[f / 2];
    EXPECT_NEAR(ex.t[1][f].item<float>(), 1000 * s, 1e-3) << f;
    EXPECT_TRUE(torch::allclose(ex.x_t.narrow(2, f, 1), (1 - s) * x0.narrow(2, f, 1) + s * noise.narrow(2, f, 1),
                                1e-5, 1e-6));
  }
  EXPECT_LT(ex.sigmas[0], ex.sigmas[1]);
  EXPECT_LT(ex.sigmas[1], ex.sigmas[2]);
  // A prediction off by d on chunk 2 only costs weight_2 * d^2 / chunks.
  auto pred = ex.target.clone();
  pred.narrow(2, 4, 2).add_(0.5);
  EXPECT_NEAR(df_loss(pred, ex, cfg).item<double>(), ex.weights[2] * 0.25 / 3, 1e-6);
  EXPECT_NEAR(df_loss(ex.target, ex, cfg).item<double>(), 0.0, 1e-12);
  test::expect_error([&] { make_df_example(x0, noise, {0.1, 0.5}, cfg, grid, w); }, {"2 noise levels", "3 chunks"});
  cfg.chunk_frames = 4;
  test::expect_error([&] { make_df_example(x0, noise, {0.1, 0.5, 0.9}, cfg, grid, w); }, {"3 chunks of 4 frames"});
}

// The causal objectives follow the SFT rule (SPEC §1): sigma, the mixing and the chunk weights from the exact level; the
// model's timesteps rounded to the compute dtype (x0's), side streams too.
TEST(Forcing, ModelTimestepsAreRoundedToTheComputeDtypeAndSigmasAreNot) {
  ForcingConfig cfg;
  cfg.chunks = 2, cfg.chunk_frames = 2;
  const auto grid = training_grid();
  const auto w = training_weights(grid);
  torch::manual_seed(0);
  const auto x0 = torch::randn({1, 4, 4, 2, 2}), noise = torch::randn_like(x0);
  const std::vector<double> u = {0.37, 0.81};
  const auto f32 = make_df_example(x0, noise, u, cfg, grid, w);
  const auto bf = make_df_example(x0.to(torch::kBFloat16), noise.to(torch::kBFloat16), u, cfg, grid, w);
  EXPECT_EQ(bf.sigmas, f32.sigmas);
  EXPECT_EQ(bf.weights, f32.weights);
  for (int64_t f = 0; f < 4; ++f) {
    const double exact = static_cast<float>(f32.sigmas[f / 2]) * 1000.0f;
    EXPECT_NEAR(f32.t[0][f].item<double>(), exact, 1e-3) << f;
    EXPECT_EQ(bf.t[0][f].item<double>(), round_timestep(f32.t[0][f].item<double>(), torch::kBFloat16)) << f;
  }
  EXPECT_NE(bf.t[0][0].item<double>(), f32.t[0][0].item<double>());  // 0.37 -> t = 637.9..., bf16 636 or 640
  const auto a0 = torch::randn({1, 2, 6}).to(torch::kBFloat16);
  const auto s = make_df_stream(a0, torch::randn({1, 2, 6}).to(torch::kBFloat16), bf, {0, 3, 6});
  EXPECT_EQ(s.t[0][0].item<double>(), bf.t[0][0].item<double>());
  EXPECT_EQ(s.t[0][5].item<double>(), bf.t[0][2].item<double>());
}

}  // namespace
}  // namespace vdt
