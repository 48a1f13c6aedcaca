// Counter-based random streams (Philox4x32-10, Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3").
// A stream is keyed by (seed, purpose); a draw is addressed by counters with meaning (epoch, sample index, ...), so
// the same draw comes out on any rank, worker or resume. Also: torch generators seeded from such keys.
// Not here: which purposes exist (their owners define them) or how draws become dropout decisions.
#pragma once
#include <torch/types.h>

#include <array>
#include <cstdint>

namespace vdt {

// Philox4x32-10 block function: counter (4 x u32) and key (2 x u32) -> 4 x u32.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class RngStream {
 public:
  RngStream(uint64_t seed, uint32_t purpose);
  // Four independent 32-bit words for counters (a, b, block). a is 64-bit; b and block are 32-bit.
  std::array<uint32_t, 4> block(uint64_t a, uint32_t b, uint32_t block = 0) const;
  // The i-th uniform double in [0, 1) of the draw (a, b); i may be any value.
  double uniform(uint64_t a, uint32_t b, uint32_t i = 0) const;
  // A 64-bit value for (a, b): used to seed a torch generator for bulk noise.
  uint64_t u64(uint64_t a, uint32_t b) const;

 private:
  std::array<uint32_t, 2> key_;
};

// A torch generator on `device` (CPU or CUDA) seeded with `seed`; independent of the global default generator.
at::Generator make_generator(const torch::Device& device, uint64_t seed);

}  // namespace vdt
