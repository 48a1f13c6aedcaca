// A minimal PNG writer (8-bit RGB, no interlace, filter 0 on every row, zlib deflate, CRC-32 via zlib) for sample
// previews, synthetic-data pictures and TensorBoard image summaries (encode_png). Written atomically: temp file beside
// the target, fsync, rename. Not here: reading PNGs, palettes, alpha, 16-bit depth.
#pragma once
#include <torch/types.h>

#include <string>

namespace vdt {

// A PNG file's bytes and the image's size (TensorBoard image summaries carry both).
struct Png {
  std::string bytes;
  int64_t height = 0, width = 0;
};

// Encodes `rgb` as a PNG in memory. Accepts [H, W, 3] uint8, or [3, H, W] floating point in [0, 1] (clamped, then
// rounded to 0..255). Any device; copied to the CPU.
Png encode_png(const torch::Tensor& rgb);
// Writes encode_png(rgb) to `path`.
void write_png(const std::string& path, const torch::Tensor& rgb);

}  // namespace vdt
