// The distillation's per-step draws (docs/distill.md): the rollout's chunk count and exit index, the same on every
// rank (Self-Forcing draws them on rank 0 and broadcasts; here they come from counter-based streams keyed by (seed,
// step) alone, so no collective is needed and a resumed run draws them again), and the DMD and critic timesteps,
// keyed by (seed, step, rank). Not here: the noise tensors (RunContext::noise with the purposes below).
#pragma once
#include <cstdint>

namespace vdt {

struct DistillDraws {
  int64_t chunks = 0;          // chunks this step's rollouts make, in [min_chunks, max_chunks]
  int64_t exit_index = 0;      // the student step whose prediction is each chunk's output, in [0, steps)
  double dmd_timestep = 0;     // the student update's noise level (0..1000, shifted, clamped to [20, 980])
  double critic_timestep = 0;  // the critic update's
};

// step: 1-based training step; rank: this rank (the timesteps differ per rank, as every sample's noise does).
DistillDraws draw_distill(uint64_t seed, int64_t step, int rank, int64_t student_steps, int64_t min_chunks,
                          int64_t max_chunks, double shift);

}  // namespace vdt
