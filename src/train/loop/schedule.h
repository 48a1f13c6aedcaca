// Learning-rate schedules as pure functions of the optimizer step (so a resume lands on the same value):
// the SFT's linear warmup then constant (seed warmup_lambda), and warmup + cosine for the causal trainer.
#pragma once
#include <cstdint>

namespace vdt {

// min(1, (step + 1) / warmup), or 1 when warmup <= 0. `step` counts optimizer steps taken before this one.
double warmup_factor(int64_t step, int64_t warmup);
// The causal trainer's factor, as the Python trainer rtcwm's cosine_with_warmup LambdaLR: a linear warmup ramp times a
// cosine from 1 to min_ratio (= lr_min / lr) over `total` steps: min(1, (step+1)/warmup) * (r + (1-r)(1+cos(pi
// min(step, total)/total))/2). warmup <= 0: no ramp.
double warmup_cosine_factor(int64_t step, int64_t warmup, int64_t total, double min_ratio);

}  // namespace vdt
