// Preview rasterisation: frames are tiled with nearest-neighbour upscaling.
#include "generate/preview.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <filesystem>

#include "core/atomic_file.h"
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

std::string step_preview_path(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%07lld.png", static_cast<long long>(step));
  return (std::filesystem::path(run_dir) / "previews" / name).string();
}

Png write_step_preview(const std::string& run_dir, int64_t step, const torch::Tensor& grid) {
  const std::string path = step_preview_path(run_dir, step);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  VDT_CHECK(!ec, std::filesystem::path(path).parent_path().string(), ": cannot create the previews directory (",
            ec.message(), ")");
  Png png = encode_png(grid);
  write_file_atomic(path, png.bytes);
  return png;
}

}  // namespace vdt
