#include "test_util.h"
#include "train/schedule.h"

namespace vdt {
namespace {

TEST(Schedule, WarmupThenConstantAsTheSeed) {
  EXPECT_DOUBLE_EQ(warmup_factor(0, 500), 1.0 / 500);
  EXPECT_DOUBLE_EQ(warmup_factor(249, 500), 0.5);
  EXPECT_DOUBLE_EQ(warmup_factor(499, 500), 1.0);
  EXPECT_DOUBLE_EQ(warmup_factor(10000, 500), 1.0);
  EXPECT_DOUBLE_EQ(warmup_factor(0, 0), 1.0);
}

TEST(Schedule, WarmupCosineEndsAtMinRatio) {
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(0, 10, 100, 0.05), 0.1);
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(10, 10, 100, 0.05), 1.0);
  EXPECT_NEAR(warmup_cosine_factor(55, 10, 100, 0.05), 0.525, 1e-12);
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(100, 10, 100, 0.05), 0.05);
}

}  // namespace
}  // namespace vdt
