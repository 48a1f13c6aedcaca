#include <cmath>

#include "test_util.h"
#include "train/loop/schedule.h"

namespace vdt {
namespace {

TEST(Schedule, WarmupThenConstantAsTheSeed) {
  EXPECT_DOUBLE_EQ(warmup_factor(0, 500), 1.0 / 500);
  EXPECT_DOUBLE_EQ(warmup_factor(249, 500), 0.5);
  EXPECT_DOUBLE_EQ(warmup_factor(499, 500), 1.0);
  EXPECT_DOUBLE_EQ(warmup_factor(10000, 500), 1.0);
  EXPECT_DOUBLE_EQ(warmup_factor(0, 0), 1.0);
}

TEST(Schedule, WarmupCosineIsTheSeedsLambda) {
  // rtcwm cosine_with_warmup: min(1, (i+1)/warmup) * (r + (1 - r) * 0.5 * (1 + cos(pi * min(i, steps) / steps)))
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(0, 10, 100, 0.05), 0.1);
  EXPECT_NEAR(warmup_cosine_factor(4, 10, 100, 0.05), 0.5 * (0.05 + 0.475 * (1 + std::cos(M_PI * 0.04))), 1e-12);
  EXPECT_NEAR(warmup_cosine_factor(10, 10, 100, 0.05), 0.05 + 0.475 * (1 + std::cos(M_PI * 0.1)), 1e-12);
  EXPECT_NEAR(warmup_cosine_factor(50, 10, 100, 0.05), 0.525, 1e-12);
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(100, 10, 100, 0.05), 0.05);
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(250, 10, 100, 0.05), 0.05);
}

}  // namespace
}  // namespace vdt
