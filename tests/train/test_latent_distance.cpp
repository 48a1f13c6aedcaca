// The distribution distance of `vdt eval`: the Fréchet distance against its closed form on known Gaussians (diagonal,
// rotated, and estimated from samples), 0 for one set against itself, and the clip features' response to a known
// shift (only the channel means move: d² = C·δ² exactly) and to known motion (a sinusoid moving one pixel a frame:
// lag-k correlation cos(2πk/P), frame-difference RMS 2·sin(π/P)·amplitude/√2).
#include <torch/torch.h>

#include <cmath>

#include "test_util.h"
#include "train/eval/clip_features.h"
#include "train/eval/frechet.h"

namespace vdt {
namespace {

GaussianFit fit_of(const torch::Tensor& mean, const torch::Tensor& cov) {
  return {mean.to(torch::kFloat64), cov.to(torch::kFloat64), 2};
}

// A random orthogonal [K, K] matrix (QR of a Gaussian one).
torch::Tensor random_rotation(int64_t k, uint64_t seed) {
  torch::manual_seed(seed);
  return std::get<0>(torch::linalg_qr(torch::randn({k, k}, torch::kFloat64)));
}

TEST(Frechet, DiagonalGaussiansMatchTheClosedForm) {
  const auto f64 = torch::kFloat64;
  const auto ma = torch::tensor({0.0, 1.0, -2.0, 0.5}, f64), mb = torch::tensor({0.5, 1.0, -1.0, 0.5}, f64);
  const auto va = torch::tensor({1.0, 4.0, 0.25, 2.0}, f64), vb = torch::tensor({2.0, 1.0, 0.25, 0.5}, f64);
  // d² = |Δμ|² + Σ (√a − √b)²
  const double want = (ma - mb).square().sum().item<double>() + (va.sqrt() - vb.sqrt()).square().sum().item<double>();
  EXPECT_NEAR(frechet_distance(fit_of(ma, torch::diag(va)), fit_of(mb, torch::diag(vb))), want, 1e-12);
  // Rotating both covariances by one orthogonal Q (they still commute) changes nothing.
  const auto q = random_rotation(4, 1);
  const auto ca = q.matmul(torch::diag(va)).matmul(q.t());
  const auto cb = q.matmul(torch::diag(vb)).matmul(q.t());
  EXPECT_NEAR(frechet_distance(fit_of(ma, ca), fit_of(mb, cb)), want, 1e-10);
}

// Non-commuting covariances: tr (Σa Σb)^½ is the sum of the square roots of Σa Σb's eigenvalues (real, >= 0), the
// slow general route the symmetric one must agree with.
TEST(Frechet, NonCommutingCovariancesMatchTheEigenvaluesOfTheProduct) {
  torch::manual_seed(3);
  const auto a = torch::randn({6, 6}, torch::kFloat64), b = torch::randn({6, 6}, torch::kFloat64);
  const auto ca = a.matmul(a.t()) + 0.1 * torch::eye(6, torch::kFloat64);
  const auto cb = b.matmul(b.t()) + 0.1 * torch::eye(6, torch::kFloat64);
  const auto ma = torch::randn({6}, torch::kFloat64), mb = torch::randn({6}, torch::kFloat64);
  const double tr_sqrt = torch::real(torch::linalg_eigvals(ca.matmul(cb))).clamp_min(0).sqrt().sum().item<double>();
  const double want =
      (ma - mb).square().sum().item<double>() + ca.trace().item<double>() + cb.trace().item<double>() - 2 * tr_sqrt;
  EXPECT_NEAR(frechet_distance(fit_of(ma, ca), fit_of(mb, cb)), want, 1e-9 * want);
}

// Samples of two known Gaussians: the fitted distance approaches the closed form (the estimate's error at 40,000
// samples of 3 dimensions is well under 2 %).
TEST(Frechet, SampledGaussiansApproachTheClosedForm) {
  torch::manual_seed(5);
  const auto q = random_rotation(3, 7);
  const auto sa = torch::tensor({1.0, 0.5, 2.0}, torch::kFloat64), sb = torch::tensor({0.5, 0.5, 1.0}, torch::kFloat64);
  const auto ma = torch::tensor({0.0, 0.0, 0.0}, torch::kFloat64),
             mb = torch::tensor({1.0, -0.5, 0.0}, torch::kFloat64);
  const auto xa = ma + torch::randn({40000, 3}, torch::kFloat64).mul(sa).matmul(q.t());
  const auto xb = mb + torch::randn({40000, 3}, torch::kFloat64).mul(sb).matmul(q.t());
  const double want = (ma - mb).square().sum().item<double>() + (sa - sb).square().sum().item<double>();
  EXPECT_NEAR(frechet_distance(xa, xb), want, 0.02 * want);
}

TEST(Frechet, IdenticalSetsAreAtZero) {
  torch::manual_seed(9);
  const auto x = torch::randn({50, 8}, torch::kFloat64);
  EXPECT_NEAR(frechet_distance(x, x), 0.0, 1e-9);
  EXPECT_NEAR(frechet_distance(x, x.flip(0)), 0.0, 1e-9);  // order does not matter
}

TEST(Frechet, BadSetsAreErrors) {
  test::expect_error([] { fit_gaussian(torch::zeros({1, 4}), "--generated D"); }, {"--generated D", "at least 2"});
  auto x = torch::zeros({3, 4});
  x[1][2] = NAN;
  test::expect_error([&] { fit_gaussian(x, "--reference R"); }, {"--reference R", "NaN"});
}

// Clips [N, C, F, H, W] of smooth random patterns, float64 (a shift is then exact to rounding).
torch::Tensor random_clips(int64_t n, int64_t c, int64_t f, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn({n, c, f, 8, 8}, torch::kFloat64).cumsum(4).div(3);
}

TEST(ClipFeatures, ShiftMovesOnlyTheMeansAndTheDistanceGrowsAsCDeltaSquared) {
  const int64_t C = 4, F = 6;
  const auto clips = random_clips(40, C, F, 11);
  const auto fa = clip_features(clips);
  ASSERT_EQ(fa.size(1), 3 * C + F - 1);
  for (const double delta : {0.1, 0.2, 0.4}) {
    const auto fb = clip_features(clips + delta);
    EXPECT_TRUE(torch::allclose(fa.slice(1, C), fb.slice(1, C), 0, 1e-9)) << "only the means move";
    EXPECT_NEAR(frechet_distance(fa, fb), C * delta * delta, 1e-9);
  }
  EXPECT_NEAR(frechet_distance(fa, clip_features(clips.clone())), 0.0, 1e-9);
}

TEST(ClipFeatures, KnownMotionGivesKnownLagCorrelationsAndDifferences) {
  // One channel, a sinusoid of period P pixels along the width moving one pixel a frame.
  const int64_t P = 8, F = 5, W = 16;
  const double amp = 1.5;
  auto clip = torch::zeros({1, 1, F, 4, W}, torch::kFloat64);
  for (int64_t f = 0; f < F; ++f)
    for (int64_t w = 0; w < W; ++w) clip.select(2, f).select(3, w).fill_(amp * std::sin(2 * M_PI * (w - f) / P));
  const auto feat = clip_features(clip)[0];  // mean, std, diff RMS, lags 1..F-1
  EXPECT_NEAR(feat[0].item<double>(), 0.0, 1e-12);
  EXPECT_NEAR(feat[1].item<double>(), amp / std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(feat[2].item<double>(), 2 * std::sin(M_PI / P) * amp / std::sqrt(2.0), 1e-12);
  for (int64_t k = 1; k < F; ++k) EXPECT_NEAR(feat[2 + k].item<double>(), std::cos(2 * M_PI * k / P), 1e-12) << k;
  // A frozen clip: no difference, every lag fully correlated; a motion change is seen by the motion group only.
  const auto frozen = clip.select(2, 0).unsqueeze(2).expand({1, 1, F, 4, W});
  const auto ff = clip_features(frozen)[0];
  EXPECT_NEAR(ff[2].item<double>(), 0.0, 1e-12);
  for (int64_t k = 1; k < F; ++k) EXPECT_NEAR(ff[2 + k].item<double>(), 1.0, 1e-12);
  const auto groups = clip_feature_groups(1, F);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].name, "appearance");
  EXPECT_EQ(groups[0].columns, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(groups[1].columns, (std::vector<int64_t>{2, 3, 4, 5, 6}));
}

}  // namespace
}  // namespace vdt
