// Philox4x32-10 with the constants of the Random123 reference (philox.h); the key mixes seed and purpose with
// SplitMix64 so that neighbouring seeds or purposes give unrelated streams.
#include "core/rng.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

namespace vdt {
namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

RngStream::RngStream(uint64_t seed, uint32_t purpose) {
  const uint64_t mixed = splitmix64(splitmix64(seed) ^ (static_cast<uint64_t>(purpose) * 0xD1B54A32D192ED03ull));
  key_ = {static_cast<uint32_t>(mixed), static_cast<uint32_t>(mixed >> 32)};
}

std::array<uint32_t, 4> RngStream::block(uint64_t a, uint32_t b, uint32_t blk) const {
  return philox4x32({static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), b, blk}, key_);
}

double RngStream::uniform(uint64_t a, uint32_t b, uint32_t i) const {
  const auto w = block(a, b, i / 2);
  const uint64_t bits = (static_cast<uint64_t>(w[2 * (i % 2)]) << 32) | w[2 * (i % 2) + 1];
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // 53 random bits
}

uint64_t RngStream::u64(uint64_t a, uint32_t b) const {
  const auto w = block(a, b, 0xFFFFFFFFu);
  return (static_cast<uint64_t>(w[0]) << 32) | w[1];
}

at::Generator make_generator(const torch::Device& device, uint64_t seed) {
  auto gen = at::globalContext().defaultGenerator(device).clone();
  gen.set_current_seed(seed);
  return gen;
}

}  // namespace vdt
