// PNG layout (ISO/IEC 15948, W3C PNG spec §5): 8-byte signature, then chunks of (length BE32, type, data, CRC-32 of
// type + data): IHDR (width, height, depth 8, colour type 2 = RGB, compression 0, filter 0, interlace 0), one IDAT
// holding the zlib stream of the scanlines (each prefixed with filter byte 0), IEND.
#include "core/png.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"

namespace vdt {
namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const uint8_t* data, size_t n) {
  VDT_CHECK(n <= 0x7FFFFFFFu, "write_png: chunk ", type, " of ", n, " bytes exceeds the PNG limit of 2^31-1");
  put_be32(out, static_cast<uint32_t>(n));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data, data + n);
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), out.data() + start, static_cast<uInt>(4 + n));
  put_be32(out, static_cast<uint32_t>(crc));
}

// [H, W, 3] uint8 contiguous on the CPU, from either accepted layout.
torch::Tensor to_hwc_u8(const torch::Tensor& rgb) {
  VDT_CHECK(rgb.defined(), "write_png: undefined tensor");
  auto t = rgb.to(torch::kCPU);
  if (t.scalar_type() == torch::kByte) {
    VDT_CHECK(t.dim() == 3 && t.size(2) == 3, "write_png: a uint8 image must be [H, W, 3], got ", t.sizes());
    return t.contiguous();
  }
  VDT_CHECK(at::isFloatingType(t.scalar_type()), "write_png: expected uint8 [H, W, 3] or float [3, H, W], got dtype ",
            t.scalar_type());
  VDT_CHECK(t.dim() == 3 && t.size(0) == 3, "write_png: a float image must be [3, H, W] in [0, 1], got ", t.sizes());
  VDT_CHECK(torch::isfinite(t).all().item<bool>(), "write_png: the float image holds NaN or Inf");
  return (t.to(torch::kFloat).clamp(0, 1) * 255).round().to(torch::kByte).permute({1, 2, 0}).contiguous();
}

}  // namespace

Png encode_png(const torch::Tensor& rgb) {
  const auto img = to_hwc_u8(rgb);
  const int64_t h = img.size(0), w = img.size(1);
  VDT_CHECK(h > 0 && w > 0 && h < (1 << 30) && w < (1 << 30), "write_png: bad image size ", h, "x", w);

  // Scanlines: filter byte 0 (None) then the row's RGB bytes.
  const size_t row = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> raw(static_cast<size_t>(h) * (row + 1));
  const uint8_t* px = img.data_ptr<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    raw[y * (row + 1)] = 0;
    std::memcpy(&raw[y * (row + 1) + 1], px + y * row, row);
  }
  uLongf zn = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(zn);
  const int zrc = compress2(z.data(), &zn, raw.data(), static_cast<uLong>(raw.size()), 6);
  VDT_CHECK(zrc == Z_OK, "write_png: zlib compress2 failed with code ", zrc);
  z.resize(zn);

  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, static_cast<uint32_t>(w));
  put_be32(ihdr, static_cast<uint32_t>(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // depth 8, RGB, deflate, filter method 0, no interlace
  put_chunk(out, "IHDR", ihdr.data(), ihdr.size());
  put_chunk(out, "IDAT", z.data(), z.size());
  put_chunk(out, "IEND", nullptr, 0);
  return {std::string(reinterpret_cast<const char*>(out.data()), out.size()), h, w};
}

void write_png(const std::string& path, const torch::Tensor& rgb) {
  const Png png = encode_png(rgb);
  write_file_atomic(path, png.bytes);
}

}  // namespace vdt
