#include <torch/torch.h>

#include <cmath>

#include "model/attention.h"
#include "model/embeddings.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(Sinusoid, MatchesIndependentFormulaCosFirst) {
  auto t = torch::tensor({0.0, 637.0, 999.8});
  auto e = sinusoidal_embedding(t, 256, torch::kFloat64);
  ASSERT_EQ(e.sizes(), (std::vector<int64_t>{3, 256}));
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 128; ++k) {
      const double tau = t[i].item<double>(), w = std::pow(10000.0, -k / 128.0);
      EXPECT_NEAR(e[i][k].item<double>(), std::cos(tau * w), 1e-12);
      EXPECT_NEAR(e[i][128 + k].item<double>(), std::sin(tau * w), 1e-12);
    }
}

// Reference angle for pair j of token (f, h, w) with head dim d, written from docs/design.md §1 directly.
double ref_angle(int64_t d, int64_t f, int64_t h, int64_t w, int64_t j) {
  const int64_t hw = 2 * (d / 6), fd = d - 2 * hw;
  if (j < fd / 2) return f * std::pow(10000.0, -2.0 * j / fd);
  j -= fd / 2;
  if (j < hw / 2) return h * std::pow(10000.0, -2.0 * j / hw);
  j -= hw / 2;
  return w * std::pow(10000.0, -2.0 * j / hw);
}

TEST(Rope, TablesMatchIndependentFormula) {
  for (int64_t d : {24, 128}) {
    const std::array<int64_t, 3> grid{3, 4, 5};
    auto rope = rope_table(d, grid, torch::kCPU);
    ASSERT_EQ(rope.cos.sizes(), (std::vector<int64_t>{60, d / 2}));
    for (int64_t f = 0; f < 3; ++f)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w)
          for (int64_t j = 0; j < d / 2; ++j) {
            const int64_t n = (f * 4 + h) * 5 + w;
            const double a = ref_angle(d, f, h, w, j);
            ASSERT_NEAR(rope.cos[n][j].item<float>(), std::cos(a), 1e-6) << d << " " << n << " " << j;
            ASSERT_NEAR(rope.sin[n][j].item<float>(), std::sin(a), 1e-6);
          }
  }
  // Head dim 128: 22 frame pairs, then 21 + 21.
  EXPECT_NEAR(ref_angle(128, 1, 0, 0, 21), std::pow(10000.0, -42.0 / 44), 1e-15);
  EXPECT_EQ(ref_angle(128, 1, 0, 0, 22), 0.0);
}

TEST(Rope, ApplyIsComplexMultiplicationOnInterleavedPairs) {
  const int64_t d = 24;
  auto rope = rope_table(d, {2, 2, 3}, torch::kCPU);
  auto x = torch::randn({2, 12, 3, d});
  auto y = apply_rope(x, rope);
  auto xc = torch::view_as_complex(x.to(torch::kFloat64).reshape({2, 12, 3, d / 2, 2}));
  auto rot = torch::polar(torch::ones_like(rope.cos, torch::kFloat64),
                          torch::atan2(rope.sin.to(torch::kFloat64), rope.cos.to(torch::kFloat64)));
  auto ref = torch::view_as_real(xc * rot.unsqueeze(1)).reshape({2, 12, 3, d});
  EXPECT_LT((y.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-5);
}

// The memoised tables equal rope_table's exactly (repeated: the half grid twice), are kept (the same storage on a
// second call) per grid, and the cache empties itself when it holds kMaxTables grids.
TEST(RopeCache, EqualsRopeTableAndKeepsItsTables) {
  RopeCache cache(24);
  const auto a = cache.get({2, 3, 4}, torch::kCPU), direct = rope_table(24, {2, 3, 4}, torch::kCPU);
  EXPECT_TRUE(torch::equal(a.cos, direct.cos) && torch::equal(a.sin, direct.sin));
  EXPECT_EQ(cache.get({2, 3, 4}, torch::kCPU).cos.data_ptr(), a.cos.data_ptr());
  const auto r = cache.get({4, 3, 4}, torch::kCPU, /*repeated=*/true), half = rope_table(24, {2, 3, 4}, torch::kCPU);
  EXPECT_TRUE(torch::equal(r.cos, torch::cat({half.cos, half.cos})) &&
              torch::equal(r.sin, torch::cat({half.sin, half.sin})));
  EXPECT_FALSE(torch::equal(r.cos, rope_table(24, {4, 3, 4}, torch::kCPU).cos));  // not the full grid's positions
  EXPECT_THROW(cache.get({3, 3, 4}, torch::kCPU, /*repeated=*/true), std::exception);
  for (int64_t f = 1; f <= static_cast<int64_t>(RopeCache::kMaxTables); ++f) cache.get({f, 1, 1}, torch::kCPU);
  EXPECT_NE(cache.get({2, 3, 4}, torch::kCPU).cos.data_ptr(), a.cos.data_ptr());  // rebuilt after the clear
  EXPECT_TRUE(torch::equal(cache.get({2, 3, 4}, torch::kCPU).cos, direct.cos));
}

// The fast paths against their spelled-out references, forward and backward, in float32 and bf16: RoPE as one
// complex multiply vs real pairs, RMSNorm through ATen's rms_norm vs op by op.
TEST(FastPaths, RopeAndRmsNormMatchTheirReferences) {
  torch::manual_seed(4);
  const auto rope = rope_table(24, {2, 3, 4}, torch::kCPU);  // L = 24, Dh = 24
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    const double tol = dt == torch::kFloat32 ? 1e-6 : 1e-2;
    auto x0 = torch::randn({2, 24, 3, 24}).to(dt);
    auto g = torch::randn({2, 24, 3, 24}).to(dt);
    auto a = x0.clone().requires_grad_(), b = x0.clone().requires_grad_();
    auto ya = apply_rope(a, rope), yb = apply_rope_reference(b, rope);
    EXPECT_EQ(ya.scalar_type(), dt);
    EXPECT_LT((ya - yb).abs().max().item<double>(), tol);
    ya.backward(g), yb.backward(g);
    EXPECT_LT((a.grad() - b.grad()).abs().max().item<double>(), tol);
    RMSNorm norm(72, 1e-6);
    {
      torch::NoGradGuard ng;
      norm->weight.uniform_(0.5, 1.5);
      norm->to(dt);
    }
    auto h0 = (torch::randn({2, 5, 72}) * 3).to(dt);
    auto ha = h0.clone().requires_grad_(), hb = h0.clone().requires_grad_();
    auto na = norm(ha), nb = rms_norm_reference(hb, norm->weight, 1e-6);
    EXPECT_LT((na - nb).abs().max().item<double>(), tol * 4);
    auto gn = torch::randn_like(na);
    na.backward(gn), nb.backward(gn);
    EXPECT_LT((ha.grad() - hb.grad()).abs().max().item<double>(), tol * 8);
  }
}

}  // namespace
}  // namespace vdt
