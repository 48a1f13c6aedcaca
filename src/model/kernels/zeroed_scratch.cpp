#include "model/kernels/zeroed_scratch.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/error.h"

namespace vdt::kernels {

namespace {
constexpr int64_t kAlign = 16;  // elements: 64 bytes, for 16-byte vector loads of the buffer
}

ZeroedScratch::ZeroedScratch(int64_t block_elems) : block_elems_(block_elems) {
  VDT_CHECK(block_elems >= kAlign, "ZeroedScratch: a block of ", block_elems, " elements is smaller than ", kAlign);
}

torch::Tensor ZeroedScratch::take(int64_t n, const torch::Device& device) {
  VDT_CHECK(n >= 0, "ZeroedScratch::take: n must be >= 0, got ", n);
  const auto opts = torch::TensorOptions().device(device).dtype(torch::kInt32);
  const int64_t rounded = (n + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(mu_);
  if (rounded > block_elems_) {
    ++fills_;
    return torch::zeros({n}, opts);
  }
  const auto stream = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
  auto& b = blocks_[{static_cast<int>(device.type()), device.index(), stream.id()}];
  if (!b.buf.defined() || b.used + rounded > block_elems_) {
    b.buf = torch::zeros({block_elems_}, opts);  // on the current stream; the old block lives on in its buffers
    b.used = 0;
    ++fills_;
  }
  auto out = b.buf.narrow(0, b.used, n);  // [n]
  b.used += rounded;
  return out;
}

int64_t ZeroedScratch::fills() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fills_;
}

// Never destroyed: its blocks are CUDA tensors, and a static's destructor may run after the CUDA context and the
// caching allocator are gone at exit (freeing a block then crashes the process that already did its work).
ZeroedScratch& zeroed_scratch() {
  static auto* scratch = new ZeroedScratch;
  return *scratch;
}

}  // namespace vdt::kernels
