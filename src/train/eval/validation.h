// SFT validation (docs/design.md §4, seed run_validation): fixed val clips x fixed timesteps x fixed noise (seeded from
// the clip id, the timestep and the seed, drawn on the CPU so every device sees the same noise); each (clip, t) runs
// `cond` (real ids and text), `uncond` (ids all UNKNOWN) and `nulltext` (null prompt in every cell) on one shared
// noise. The gaps uncond - cond and nulltext - cond read out whether the conditions are used. Not here: distribution
// across ranks (the trainer reduces the sums).
#pragma once
#include <torch/types.h>

#include <vector>

#include "core/fnv1a.h"
#include "data/sft_dataset.h"
#include "model/denoiser.h"

namespace vdt {

struct ValRow {
  double timestep = 0;   // the grid point evaluated (the Python trainer's key: 201.34 for a requested 200)
  double requested = 0;  // the --val_timesteps entry it was snapped from
  double mse = 0, mse_uncond = 0, mse_nulltext = 0;  // means over clips
  double gap_uncond = 0, gap_nulltext = 0;
  int64_t n = 0;
};

struct ValConfig {
  std::vector<double> timesteps = {200, 500, 800};
  bool variants = true;  // also uncond and nulltext
  bool first_frame_cond = true;
  uint64_t seed = 0;
  int64_t max_clips = 16;
  int rank = 0, world = 1;  // this rank validates clips rank, rank + world, ... (the trainer reduces the rows)
};

std::vector<ValRow> run_validation(Denoiser& model, const SftDataset& val, const ValConfig& cfg);

}  // namespace vdt
