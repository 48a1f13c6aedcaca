#include "train/distill/distill_draws.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "diffusion/dmd.h"

namespace vdt {

DistillDraws draw_distill(uint64_t seed, int64_t step, int rank, int64_t student_steps, int64_t min_chunks,
                          int64_t max_chunks, double shift) {
  VDT_CHECK(student_steps >= 1 && min_chunks >= 1 && min_chunks <= max_chunks, "draw_distill: ", student_steps,
            " steps, chunks in [", min_chunks, ", ", max_chunks, "]");
  const auto s = static_cast<uint64_t>(step);
  const RngStream rollout(seed, rng_purpose::kDistillRollout);
  DistillDraws d;
  const auto pick = [](double u, int64_t n) { return std::min(static_cast<int64_t>(std::floor(u * n)), n - 1); };
  d.exit_index = pick(rollout.uniform(s, 0), student_steps);
  d.chunks = min_chunks + pick(rollout.uniform(s, 1), max_chunks - min_chunks + 1);
  const RngStream times(seed, rng_purpose::kDistillTimestep);
  d.dmd_timestep = dmd_timestep(times.uniform(s, static_cast<uint32_t>(rank), 0), shift);
  d.critic_timestep = dmd_timestep(times.uniform(s, static_cast<uint32_t>(rank), 1), shift);
  return d;
}

}  // namespace vdt
