#include <torch/torch.h>

#include <cmath>

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

// Reference angle for pair j of token (f, h, w) with head dim d, written from wan_spec §3.6 directly.
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

}  // namespace
}  // namespace vdt
