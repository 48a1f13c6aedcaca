// Diffusion forcing: the shifted noise-level distribution against its closed form, per-frame timesteps and noising
// per chunk, the clean first frame, and a loss that weights each chunk by the bell weight of its t.
#include <torch/torch.h>

#include <algorithm>

#include "core/rng.h"
#include "core/safetensors.h"
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
  for (size_t i = 0; i < sig.size(); ++i) ks = std::max(ks, std::abs(sigma_cdf(sig[i], 3.0) - (i + 0.5) / sig.size()));
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
    EXPECT_TRUE(
        torch::allclose(ex.x_t.narrow(2, f, 1), (1 - s) * x0.narrow(2, f, 1) + s * noise.narrow(2, f, 1), 1e-5, 1e-6));
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

// The causal objectives follow the SFT rule (docs/design.md §1): sigma, the mixing and the chunk weights from the exact
// level; the model's timesteps rounded to the compute dtype (x0's), side streams too.
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

// MiniMax-H3 keeps the model timestep in float32 (DiffSynth's H3 loss): no bf16 rounding before 1 - t/1000, where
// bf16(998.3) would be 1000. Wan rounds (the rule above).
TEST(Forcing, AnH3BaseSeesItsTimestepsInFloat32) {
  ForcingConfig cfg;
  cfg.chunks = 2, cfg.chunk_frames = 2;
  cfg.round_timestep = flow_schedule("h3").round_model_timestep;
  const auto grid = training_grid(1000, flow_schedule("h3").train_shift);
  const auto w = training_weights(grid);
  torch::manual_seed(0);
  const auto x0 = torch::randn({1, 4, 4, 2, 2}).to(torch::kBFloat16), noise = torch::randn_like(x0);
  // sigma 0.9983 at level shift 3: u = sigma / (3 - 2 sigma)
  const double sigma = 0.9983, u0 = sigma / (3 - 2 * sigma);
  const auto ex = make_df_example(x0, noise, {u0, 0.37}, cfg, grid, w);
  const float exact = static_cast<float>(df_sigma(u0, 3.0)) * 1000.0f;
  EXPECT_NEAR(exact, 998.3, 1e-3);
  EXPECT_EQ(ex.t[0][0].item<float>(), exact);
  EXPECT_NE(ex.t[0][0].item<double>(), round_timestep(exact, torch::kBFloat16));  // bf16: 1000
  const auto s = make_df_stream(torch::randn({1, 2, 6}).to(torch::kBFloat16),
                                torch::randn({1, 2, 6}).to(torch::kBFloat16), ex, {0, 3, 6});
  EXPECT_EQ(s.t[0][0].item<float>(), exact);
  cfg.round_timestep = flow_schedule("wan").round_model_timestep;
  EXPECT_EQ(make_df_example(x0, noise, {u0, 0.37}, cfg, grid, w).t[0][0].item<double>(), 1000.0);
}

// An H3 loss at a known t is DiffSynth's training_weight(t) x MSE: every chunk at the grid point t ~ 500.5 of
// set_timesteps_minimax_h3 weighs the fixture's train.weights there (1.692), video and audio alike.
TEST(Forcing, AnH3LossAtAKnownTimestepIsDiffSynthsWeightTimesTheMse) {
  auto f = SafetensorsFile::open(test::fixture("flow_match_h3.safetensors"));
  const auto ref_t = f->get("train.timesteps"), ref_sigma = f->get("train.sigmas"), ref_w = f->get("train.weights");
  const int64_t id = (ref_t - 500.0).abs().argmin().item<int64_t>();
  const double sigma = ref_sigma[id].item<double>(), weight = ref_w[id].item<double>();
  ASSERT_NEAR(weight, 1.692, 1e-3);
  ForcingConfig cfg;
  cfg.chunks = 3, cfg.chunk_frames = 1, cfg.level_shift = 3.0, cfg.round_timestep = false;
  const auto grid = training_grid(1000, flow_schedule("h3").train_shift);
  const auto w = training_weights(grid);
  const double u = sigma / (cfg.level_shift - (cfg.level_shift - 1) * sigma);  // the level that lands on sigma
  torch::manual_seed(3);
  const auto x0 = torch::randn({1, 24, 3, 2, 2}), noise = torch::randn_like(x0);
  const auto ex = make_df_example(x0, noise, {u, u, u}, cfg, grid, w);
  for (double cw : ex.weights) EXPECT_FLOAT_EQ(cw, weight);
  const auto pred = torch::randn_like(x0);
  const double mse = (pred - (noise - x0)).pow(2).mean().item<double>();
  EXPECT_NEAR(df_loss(pred, ex, cfg).item<double>(), weight * mse, 1e-5 * weight * mse);
  const auto a0 = torch::randn({1, 2, 32, 6}), an = torch::randn_like(a0), apred = torch::randn_like(a0);
  const auto st = make_df_stream(a0, an, ex, {0, 2, 4, 6});
  const double amse = (apred - (an - a0)).pow(2).mean().item<double>();
  EXPECT_NEAR(df_stream_loss(apred, st, ex).item<double>(), weight * amse, 1e-5 * weight * amse);
}

}  // namespace
}  // namespace vdt
