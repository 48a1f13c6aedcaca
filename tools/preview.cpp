// Preview rasterisation: frames are tiled with nearest-neighbour upscaling.
#include "tools/preview.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace vdt {

torch::Tensor frame_grid(const std::vector<torch::Tensor>& rows, int64_t pad, int64_t upscale) {
  VDT_CHECK(!rows.empty(), "frame_grid: no rows");
  const auto s = rows[0].sizes();  // [F, 3, H, W]
  const int64_t F = s[0], H = s[2] * upscale, W = s[3] * upscale;
  auto canvas = torch::ones({3, static_cast<int64_t>(rows.size()) * (H + pad) + pad, F * (W + pad) + pad});
  for (size_t r = 0; r < rows.size(); ++r) {
    VDT_CHECK(rows[r].sizes() == s, "frame_grid: row ", r, " has shape ", rows[r].sizes(), ", expected ", s);
    auto up = rows[r].to(torch::kFloat32).clamp(0, 1).repeat_interleave(upscale, 2).repeat_interleave(upscale, 3);
    for (int64_t f = 0; f < F; ++f) {
      const int64_t y0 = pad + static_cast<int64_t>(r) * (H + pad), x0 = pad + f * (W + pad);
      canvas.slice(1, y0, y0 + H).slice(2, x0, x0 + W).copy_(up[f]);
    }
  }
  return canvas;
}

}  // namespace vdt
