// Preview pictures for samples and runs: a grid of frames (rows = ground truth / generated with conditions /
// generated without) and a two-panel line plot of the training loss and the validation gaps over steps.
// Plain rasterisation into RGB tensors written with core/png; no fonts (the caller prints the legend).
#pragma once
#include <torch/types.h>

#include <array>
#include <string>
#include <vector>

namespace vdt {

// rows: each [F, 3, H, W] float in [0, 1] with equal shapes -> [3, rows*(H+pad)+pad, F*(W+pad)+pad], pad in white.
torch::Tensor frame_grid(const std::vector<torch::Tensor>& rows, int64_t pad = 2, int64_t upscale = 1);

struct Curve {
  std::vector<double> x, y;
  std::array<uint8_t, 3> colour;
};
// Draws each panel's curves (own y range, zero line when the range spans 0) into one PNG of size w x h per panel,
// panels stacked vertically.
void plot_panels(const std::string& path, const std::vector<std::vector<Curve>>& panels, int64_t w = 640,
                 int64_t h = 240);

}  // namespace vdt
