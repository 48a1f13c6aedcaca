#include "train/device.h"

#include <torch/cuda.h>

#include "core/error.h"

namespace vdt {

c10::Device training_device(const std::string& flag, int index) {
  const bool cuda = flag == "cuda" || (flag == "auto" && torch::cuda::is_available());
  VDT_CHECK(!cuda || torch::cuda::is_available(), "--device cuda: no CUDA device is visible");
  return cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)) : c10::Device(c10::kCPU);
}

}  // namespace vdt
