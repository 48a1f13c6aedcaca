// Preview rasterisation: frames are tiled with nearest-neighbour upscaling; curves are drawn as 2-pixel polylines.
#include "tools/preview.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/png.h"

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

namespace {

void draw_line(torch::Tensor& img, double x0, double y0, double x1, double y1, const std::array<uint8_t, 3>& c) {
  auto a = img.accessor<uint8_t, 3>();  // [H, W, 3]
  const int64_t H = img.size(0), W = img.size(1);
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(std::max(std::abs(x1 - x0), std::abs(y1 - y0))));
  for (int64_t i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    const int64_t x = std::lround(x0 + t * (x1 - x0)), y = std::lround(y0 + t * (y1 - y0));
    for (int64_t dy = 0; dy < 2; ++dy)
      for (int64_t dx = 0; dx < 2; ++dx)
        if (y + dy >= 0 && y + dy < H && x + dx >= 0 && x + dx < W)
          for (int k = 0; k < 3; ++k) a[y + dy][x + dx][k] = c[k];
  }
}

}  // namespace

void plot_panels(const std::string& path, const std::vector<std::vector<Curve>>& panels, int64_t w, int64_t h) {
  const int64_t m = 12;  // margin
  auto img = torch::full({h * static_cast<int64_t>(panels.size()), w, 3}, 255, torch::kByte);
  for (size_t p = 0; p < panels.size(); ++p) {
    double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
    for (const auto& c : panels[p])
      for (size_t i = 0; i < c.x.size(); ++i)
        if (std::isfinite(c.y[i])) {
          xmin = std::min(xmin, c.x[i]), xmax = std::max(xmax, c.x[i]);
          ymin = std::min(ymin, c.y[i]), ymax = std::max(ymax, c.y[i]);
        }
    if (xmin > xmax) continue;
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) ymax = ymin + 1;
    const double oy = static_cast<double>(p) * h;
    auto X = [&](double x) { return m + (x - xmin) / (xmax - xmin) * (w - 2 * m); };
    auto Y = [&](double y) { return oy + h - m - (y - ymin) / (ymax - ymin) * (h - 2 * m); };
    const std::array<uint8_t, 3> grey{160, 160, 160}, black{0, 0, 0};
    draw_line(img, m, oy + h - m, w - m, oy + h - m, black);  // x axis
    draw_line(img, m, oy + m, m, oy + h - m, black);          // y axis
    if (ymin < 0 && ymax > 0) draw_line(img, m, Y(0), w - m, Y(0), grey);
    for (const auto& c : panels[p])
      for (size_t i = 1; i < c.x.size(); ++i)
        if (std::isfinite(c.y[i - 1]) && std::isfinite(c.y[i]))
          draw_line(img, X(c.x[i - 1]), Y(c.y[i - 1]), X(c.x[i]), Y(c.y[i]), c.colour);
  }
  write_png(path, img);
}

}  // namespace vdt
