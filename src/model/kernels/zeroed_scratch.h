// Small zero-filled buffers for kernels that max or add into them (the FP8 passes' column maxima: float32 [C] of a few
// KiB, by count of the calls ~770 a 5B SFT step), carved from a larger zeroed block: one fill launch a block instead of
// one a buffer (the traced 5B SFT FP8 step: 7600 -> 6763 kernels). A buffer is handed out once,
// never re-zeroed; it keeps its block's storage alive while it lives. Blocks are kept per device and stream: a buffer
// is ready for work enqueued on the stream that was current when it was taken (the block's fill came first on it).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

namespace vdt::kernels {

class ZeroedScratch {
 public:
  explicit ZeroedScratch(int64_t block_elems = int64_t{1} << 20);  // 4 MiB blocks of int32
  // [n] int32 zeros on device (its current stream), 64-byte aligned and not overlapping any other buffer handed out;
  // a request larger than a block gets its own zeros. View as float32 for float maxima (0 bits are 0.0f).
  torch::Tensor take(int64_t n, const torch::Device& device);
  int64_t fills() const;  // zero fills launched so far (blocks and oversized requests)

 private:
  struct Block {
    torch::Tensor buf;  // [block_elems] int32
    int64_t used = 0;
  };
  const int64_t block_elems_;
  mutable std::mutex mu_;
  std::map<std::tuple<int, int, int64_t>, Block> blocks_;  // (device type, index, stream id)
  int64_t fills_ = 0;
};

// The process's scratch (the FP8 linears' column maxima)
ZeroedScratch& zeroed_scratch();

}  // namespace vdt::kernels
