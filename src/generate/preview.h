// Preview pictures for samples: a grid of frames (rows = ground truth / generated with conditions / generated
// without), written with core/png; the trainers' previews at validation (previews/step_NNNNNNN.png, and the PNG for
// TensorBoard). Not here: plots of a run (python/: `python -m vdt_py plot`, matplotlib).
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "core/png.h"

namespace vdt {

// rows: each [F, 3, H, W] float in [0, 1] with equal shapes -> [3, rows*(H+pad)+pad, F*(W+pad)+pad], pad in white.
torch::Tensor frame_grid(const std::vector<torch::Tensor>& rows, int64_t pad = 2, int64_t upscale = 1);

// <run dir>/previews/step_NNNNNNN.png for a trainer's preview at `step`
std::string step_preview_path(const std::string& run_dir, int64_t step);
// Encodes `grid` (frame_grid's [3, H, W]) as a PNG, writes it to step_preview_path (atomically, creating previews/)
// and returns it for TensorBoard.
Png write_step_preview(const std::string& run_dir, int64_t step, const torch::Tensor& grid);

}  // namespace vdt
