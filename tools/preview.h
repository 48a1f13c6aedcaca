// Preview pictures for samples: a grid of frames (rows = ground truth / generated with conditions / generated
// without), written with core/png. Not here: plots of a run (python/: `python -m vdt_py plot`, matplotlib).
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

namespace vdt {

// rows: each [F, 3, H, W] float in [0, 1] with equal shapes -> [3, rows*(H+pad)+pad, F*(W+pad)+pad], pad in white.
torch::Tensor frame_grid(const std::vector<torch::Tensor>& rows, int64_t pad = 2, int64_t upscale = 1);

}  // namespace vdt
