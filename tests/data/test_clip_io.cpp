// Per-clip readers: every bad latent / cond / meta file gives an error naming the file and what was expected; .npz
// cond files (stored, deflated, numpy's zip64 local headers) read the same as safetensors.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "data/clip_io.h"
#include "data_test_util.h"

namespace vdt {
namespace {

using test::expect_error;
using test::TinyRoot;

// A .npy v1.0 image of a C-order uint8 array.
std::string npy_bytes(const torch::Tensor& t, const std::string& descr = "|u1") {
  std::string shape;
  for (int64_t d : t.sizes()) shape += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  const auto c = t.contiguous();
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return out;
}

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>((v >> 8) & 0xFF);
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xFFFF);
  put16(s, v >> 16);
}

// A one-member zip written by hand. `zip64_local`: sizes 0xFFFFFFFF in the local header plus a zip64 extra field,
// as numpy's savez (force_zip64) writes them.
void write_npz(const std::string& path, const std::string& name, const std::string& data, bool deflated,
               bool zip64_local) {
  std::string payload = data;
  if (deflated) {
    z_stream zs{};
    deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    payload.assign(deflateBound(&zs, data.size()), '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    zs.avail_in = data.size();
    zs.next_out = reinterpret_cast<Bytef*>(payload.data());
    zs.avail_out = payload.size();
    ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    payload.resize(zs.total_out);
    deflateEnd(&zs);
  }
  const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(data.data()), data.size());
  const uint16_t method = deflated ? 8 : 0;
  std::string z;
  put32(z, 0x04034b50);
  put16(z, 45);
  put16(z, 0);
  put16(z, method);
  put32(z, 0);  // time, date
  put32(z, crc);
  put32(z, zip64_local ? 0xFFFFFFFFu : payload.size());
  put32(z, zip64_local ? 0xFFFFFFFFu : data.size());
  put16(z, name.size());
  put16(z, zip64_local ? 20 : 0);
  z += name;
  if (zip64_local) {
    put16(z, 0x0001);
    put16(z, 16);
    put32(z, data.size()), put32(z, 0);
    put32(z, payload.size()), put32(z, 0);
  }
  z += payload;
  const uint32_t cd = z.size();
  put32(z, 0x02014b50);
  put16(z, 45);
  put16(z, 45);
  put16(z, 0);
  put16(z, method);
  put32(z, 0);
  put32(z, crc);
  put32(z, payload.size());
  put32(z, data.size());
  put16(z, name.size());
  put16(z, 0);
  put16(z, 0);
  put16(z, 0);
  put16(z, 0);
  put32(z, 0);
  put32(z, 0);  // local header offset
  z += name;
  const uint32_t cd_size = z.size() - cd;
  put32(z, 0x06054b50);
  put16(z, 0);
  put16(z, 0);
  put16(z, 1);
  put16(z, 1);
  put32(z, cd_size);
  put32(z, cd);
  put16(z, 0);
  TinyRoot::write_text(path, z);
}

DatasetInfo tiny_info(TinyRoot& t) { return parse_dataset_json(t.file("dataset.json")); }

TEST(DataClipIo, NpzCondStoredDeflatedAndZip64ReadLikeSafetensors) {
  TinyRoot t;
  const auto info = tiny_info(t);
  const auto ids = TinyRoot::ids_for(5);
  const auto ref = read_ids(t.cond("t0"), info, 20).clone();
  int k = 0;
  for (const bool deflated : {false, true})
    for (const bool zip64 : {false, true}) {
      const std::string path = t.file("cond/x" + std::to_string(k++) + ".npz");
      write_npz(path, "ids.npy", npy_bytes(ids), deflated, zip64);
      const auto got = read_ids(path, info, 20);
      EXPECT_EQ(got.scalar_type(), torch::kByte);
      EXPECT_TRUE(torch::equal(got, ids)) << path;
    }
  // DataRoot prefers .safetensors, falls back to .npz.
  std::filesystem::remove(t.cond("t0"));
  write_npz(t.file("cond/t0.npz"), "ids.npy", npy_bytes(TinyRoot::ids_for(0)), true, true);
  const auto root = DataRoot::open(t.root());
  EXPECT_EQ(root.cond_path("t0"), t.file("cond/t0.npz"));
  EXPECT_TRUE(torch::equal(read_ids(root.cond_path("t0"), info, 20), ref));
}

TEST(DataClipIo, NpzErrorsNameFileAndKey) {
  TinyRoot t;
  const auto info = tiny_info(t);
  const std::string p = t.file("cond/bad.npz");
  write_npz(p, "other.npy", npy_bytes(TinyRoot::ids_for(0)), false, false);
  expect_error([&] { read_ids(p, info, 20); }, {p, "'ids.npy'"});
  write_npz(p, "ids.npy", npy_bytes(TinyRoot::ids_for(0).to(torch::kInt), "<i4"), true, false);
  expect_error([&] { read_ids(p, info, 20); }, {p, "uint8"});
  TinyRoot::write_text(p, "not a zip at all, just some text");
  expect_error([&] { read_ids(p, info, 20); }, {p, "not a zip"});
}

TEST(DataClipIo, MissingLatentAndCondFiles) {
  TinyRoot t;
  const auto info = tiny_info(t);
  std::filesystem::remove(t.latent("t0"));
  std::filesystem::remove(t.cond("t0"));
  expect_error([&] { read_latents(t.latent("t0"), info); }, {t.latent("t0"), "missing latent file"});
  expect_error([&] { read_ids(t.cond("t0"), info, 20); }, {t.cond("t0"), "missing cond file", "t0.npz"});
  expect_error([&] { SftDataset ds(t.config()); }, {t.latent("t0"), "missing latent file"});
}

TEST(DataClipIo, LatentShapeDtypeAndNonFinite) {
  TinyRoot t;
  const auto info = tiny_info(t);
  const auto p = t.latent("t1");
  t.write_latents("t1", torch::zeros({4, 2, 4, 4}, torch::kBFloat16));  // F < latent_frames
  expect_error([&] { read_latents(p, info); }, {p, "shape [4, 2, 4, 4]", "[4, >=3, 4, 4]"});
  t.write_latents("t1", torch::zeros({5, 3, 4, 4}, torch::kBFloat16));  // C
  expect_error([&] { read_latents(p, info); }, {p, "shape [5, 3, 4, 4]"});
  t.write_latents("t1", torch::zeros({4, 3, 4, 4}, torch::kInt));
  expect_error([&] { read_latents(p, info); }, {p, "dtype I32", "expected BF16"});
  t.write_latents("t1", torch::zeros({4, 3, 4, 4}, torch::kBFloat16), "x");
  expect_error([&] { read_latents(p, info); }, {p, "'latents'"});
  // Longer F is allowed; SFT takes the first latent_frames. F32 converts to bf16.
  auto longer = torch::randn({4, 5, 4, 4});
  t.write_latents("t1", longer);
  const auto got = read_latents(p, info, 3);
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(got, longer.narrow(1, 0, 3).to(torch::kBFloat16)));
  longer[2][4][1][1] = std::numeric_limits<float>::infinity();
  t.write_latents("t1", longer);
  expect_error([&] { read_latents(p, info); }, {p, "1 NaN/Inf", "channel 2, frame 4"});
  longer[2][4][1][1] = 3.4e38f;  // finite in fp32, rounds to inf in bf16
  t.write_latents("t1", longer);
  EXPECT_NO_THROW(read_latents(p, info, 3));  // frames past latent_frames are not loaded for SFT
  expect_error([&] { read_latents(p, info); }, {p, "NaN/Inf"});
}

TEST(DataClipIo, IdsShapeDtypeAndRange) {
  TinyRoot t;
  const auto info = tiny_info(t);
  const auto p = t.cond("t2");
  t.write_ids("t2", torch::zeros({3, 8, 4}, torch::kByte));
  expect_error([&] { read_ids(p, info, 20); }, {p, "shape [3, 8, 4]", "[>=3, 8, 8]", "sem_scale 2"});
  t.write_ids("t2", torch::zeros({3, 8, 8}, torch::kLong));
  expect_error([&] { read_ids(p, info, 20); }, {p, "dtype I64", "U8"});
  auto ids = TinyRoot::ids_for(0);
  ids[2][5][6] = 77;
  t.write_ids("t2", ids);
  expect_error([&] { read_ids(p, info, 20); }, {p, "frame 2", "id 77", "row 5, column 6", "0..19 or 255"});
  expect_error([&] { SftDataset(t.config()).get(2, 0); }, {p, "frame 2", "id 77"});
}

TEST(DataClipIo, MetaAffinesAndMissingMetaIsIdentity) {
  TinyRoot t;
  auto m = read_meta(t.meta("t0"), 3);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1], kIdentityAffine);
  t.write_meta("t0", {{2, 0, 0.1, 0, 2, 0.2}, {1, 0, 0, 0, 1, 0}, {1, 0, 0, 0, 1, 0}});
  m = read_meta(t.meta("t0"), 3);
  EXPECT_EQ(m[0][2], 0.1);
  expect_error([&] { read_meta(t.meta("t0"), 4); }, {t.meta("t0"), "3 frames", "at least 4"});
  TinyRoot::write_text(t.meta("t0"), R"({"world_to_image": [[[1, 0], [0, 1, 0]]]})");
  expect_error([&] { read_meta(t.meta("t0"), 1); }, {t.meta("t0"), "frame 0", "[[a, b, c], [d, e, f]]"});
}

}  // namespace
}  // namespace vdt
