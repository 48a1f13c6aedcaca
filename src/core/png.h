// A minimal PNG writer (8-bit RGB, no interlace, filter 0 on every row, zlib deflate, CRC-32 via zlib) for sample
// previews and synthetic-data pictures. Written atomically: temp file beside the target, fsync, rename.
// Not here: reading PNGs, palettes, alpha, 16-bit depth.
#pragma once
#include <torch/types.h>

#include <string>

namespace vdt {

// Writes `rgb` to `path` as a PNG. Accepts [H, W, 3] uint8, or [3, H, W] floating point in [0, 1] (clamped, then
// rounded to 0..255). Any device; copied to the CPU.
void write_png(const std::string& path, const torch::Tensor& rgb);

}  // namespace vdt
