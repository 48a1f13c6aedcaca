// write_png: the file is re-read chunk by chunk (signature, IHDR, CRC of every chunk, IDAT inflated back to the
// exact pixels) without any PNG library.
#include <torch/torch.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/png.h"
#include "test_util.h"

namespace vdt {
namespace {

using test::expect_error;
using test::TempDir;

struct Chunk {
  std::string type;
  std::vector<uint8_t> data;
  bool crc_ok = false;
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

std::vector<Chunk> read_chunks(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  EXPECT_GE(b.size(), 8u);
  EXPECT_TRUE(std::equal(sig, sig + 8, b.begin())) << "bad PNG signature";
  std::vector<Chunk> out;
  size_t pos = 8;
  while (pos + 12 <= b.size()) {
    const uint32_t n = be32(&b[pos]);
    EXPECT_LE(pos + 12 + n, b.size()) << "chunk runs past the end";
    if (pos + 12 + n > b.size()) break;
    Chunk c;
    c.type.assign(reinterpret_cast<const char*>(&b[pos + 4]), 4);
    c.data.assign(b.begin() + pos + 8, b.begin() + pos + 8 + n);
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), &b[pos + 4], 4 + n);
    c.crc_ok = crc == be32(&b[pos + 8 + n]);
    out.push_back(std::move(c));
    pos += 12 + n;
  }
  EXPECT_EQ(pos, b.size()) << "trailing bytes after the last chunk";
  return out;
}

// Checks the structure of `path` and returns its pixels as [H, W, 3] uint8.
torch::Tensor decode_png(const std::string& path, int64_t h, int64_t w) {
  const auto chunks = read_chunks(path);
  EXPECT_EQ(chunks.size(), 3u);
  if (chunks.size() != 3) return {};
  for (const auto& c : chunks) EXPECT_TRUE(c.crc_ok) << c.type;
  EXPECT_EQ(chunks[0].type, "IHDR");
  EXPECT_EQ(chunks[1].type, "IDAT");
  EXPECT_EQ(chunks[2].type, "IEND");
  EXPECT_TRUE(chunks[2].data.empty());
  const auto& ih = chunks[0].data;
  EXPECT_EQ(ih.size(), 13u);
  EXPECT_EQ(be32(&ih[0]), static_cast<uint32_t>(w));
  EXPECT_EQ(be32(&ih[4]), static_cast<uint32_t>(h));
  EXPECT_EQ(ih[8], 8);  // bit depth
  EXPECT_EQ(ih[9], 2);  // RGB
  EXPECT_EQ(ih[10] | ih[11] | ih[12], 0);
  std::vector<uint8_t> raw(h * (w * 3 + 1));
  uLongf n = raw.size();
  EXPECT_EQ(uncompress(raw.data(), &n, chunks[1].data.data(), chunks[1].data.size()), Z_OK);
  EXPECT_EQ(n, raw.size());
  auto img = torch::empty({h, w, 3}, torch::kByte);
  for (int64_t y = 0; y < h; ++y) {
    EXPECT_EQ(raw[y * (w * 3 + 1)], 0) << "filter byte of row " << y;
    std::memcpy(img.data_ptr<uint8_t>() + y * w * 3, &raw[y * (w * 3 + 1) + 1], w * 3);
  }
  return img;
}

TEST(Png, Uint8RoundTripExactPixels) {
  TempDir dir;
  const auto img = torch::randint(0, 256, {7, 13, 3}, torch::kLong).to(torch::kByte);
  write_png(dir.file("a.png"), img);
  EXPECT_TRUE(torch::equal(decode_png(dir.file("a.png"), 7, 13), img));
  // Atomic write: only the target is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(Png, FloatChwIsClampedAndRounded) {
  TempDir dir;
  auto x = torch::rand({3, 4, 5}) * 1.4 - 0.2;  // some values outside [0, 1]
  write_png(dir.file("b.png"), x);
  const auto want = (x.clamp(0, 1) * 255).round().to(torch::kByte).permute({1, 2, 0});
  EXPECT_TRUE(torch::equal(decode_png(dir.file("b.png"), 4, 5), want));
}

TEST(Png, OverwritesExistingFile) {
  TempDir dir;
  write_png(dir.file("c.png"), torch::zeros({2, 2, 3}, torch::kByte));
  const auto img = torch::full({3, 1, 3}, 200, torch::kByte);
  write_png(dir.file("c.png"), img);
  EXPECT_TRUE(torch::equal(decode_png(dir.file("c.png"), 3, 1), img));
}

TEST(Png, RejectsBadInput) {
  TempDir dir;
  expect_error([&] { write_png(dir.file("d.png"), torch::zeros({4, 4}, torch::kByte)); }, {"[H, W, 3]"});
  expect_error([&] { write_png(dir.file("d.png"), torch::zeros({4, 4, 3})); }, {"[3, H, W]"});
  expect_error([&] { write_png(dir.file("d.png"), torch::zeros({3, 2, 2}, torch::kInt)); }, {"dtype"});
  expect_error([&] { write_png(dir.file("d.png"), torch::full({3, 2, 2}, NAN)); }, {"NaN"});
  expect_error(
      [&] {
        write_png(dir.file("no/such/dir/d.png"), torch::zeros({2, 2, 3}, torch::kByte));
      },
      {"no/such/dir/d.png"});
}

}  // namespace
}  // namespace vdt
