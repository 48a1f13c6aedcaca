// Schedules; the SFT form reproduces the Python trainer's LambdaLR coefficient exactly.
#include "train/loop/schedule.h"

#include <algorithm>
#include <cmath>

namespace vdt {

double warmup_factor(int64_t step, int64_t warmup) {
  if (warmup <= 0) return 1.0;
  return std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warmup));
}

double warmup_cosine_factor(int64_t step, int64_t warmup, int64_t total, double min_ratio) {
  const double t = static_cast<double>(std::min(step, total)) / static_cast<double>(std::max<int64_t>(total, 1));
  return warmup_factor(step, warmup) * (min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(M_PI * t)));
}

}  // namespace vdt
