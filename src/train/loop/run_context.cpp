#include "train/loop/run_context.h"

#include <torch/cuda.h>
#include <torch/torch.h>
#include <zlib.h>

#include <fstream>

#include "core/device_flag.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/stop_signal.h"

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#define VDT_HAS_CUDA_ALLOC 1
#endif

namespace vdt {

double peak_memory_gb(const torch::Device& device) {
#ifdef VDT_HAS_CUDA_ALLOC
  if (device.is_cuda())
    return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index())
                                   .allocated_bytes[0]
                                   .peak) /
           (1ull << 30);
#endif
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);
  return 0;
}

RunContext::RunContext(Communicator& c, const std::string& device_flag, int device_index, torch::ScalarType dt)
    : comm(c),
      rank(c.rank()),
      world(c.world()),
      device(resolve_device(device_flag, device_index, c.world())),
      dtype(dt) {}

torch::Tensor RunContext::all_reduce_step(const std::vector<torch::Tensor>& values) {
  const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  std::vector<torch::Tensor> parts;
  for (const auto& t : values) parts.push_back(t.detach().to(f32).reshape({1}));
  parts.push_back(torch::full({1}, StopOnSignal::requested() ? 1.0f : 0.0f, f32));
  auto shared = torch::cat(parts);
  comm.all_reduce(shared)->wait();
  return shared;
}

bool RunContext::stop_requested_anywhere() { return to_host(all_reduce_step({})).stop; }

StepScalars RunContext::to_host(const torch::Tensor& reduced, const std::vector<torch::Tensor>& local) const {
  std::vector<torch::Tensor> all = {reduced.to(torch::kFloat32)};
  for (const auto& t : local) all.push_back(t.detach().to(reduced.device(), torch::kFloat32).reshape({1}));
  const auto host = torch::cat(all).to(torch::kCPU).to(torch::kFloat64).contiguous();  // the one sync of the step
  const double* v = host.data_ptr<double>();
  const size_t n = static_cast<size_t>(reduced.numel()) - 1;
  StepScalars s;
  for (size_t i = 0; i < n; ++i) s.mean.push_back(v[i] / world);
  s.stop = v[n] > 0;
  for (size_t i = 0; i < local.size(); ++i) s.local.push_back(v[n + 1 + i]);
  return s;
}

torch::Tensor RunContext::noise(const torch::Tensor& like, uint64_t seed, uint32_t purpose, uint64_t key) const {
  auto gen = make_generator(like.device(), RngStream(seed, purpose).u64(key, 0));
  return torch::randn(like.sizes(), gen, like.options().dtype(torch::kFloat32)).to(like.scalar_type());
}

void RunContext::fail_non_finite(int64_t step, double loss, const std::string& intact, const std::string& hint) const {
  VDT_FAIL("step ", step, ": loss = ", loss, " (non-finite); the update was skipped and training stops. ", intact,
           "\n---> HINT: ", hint);
}

double RunContext::peak_memory_gb() const { return vdt::peak_memory_gb(device); }

double pinned_host_gb(const torch::Device& device) {
#ifdef VDT_HAS_CUDA_ALLOC
  if (device.is_cuda())
    return static_cast<double>(at::getHostAllocator(at::kCUDA)->get_stats().allocated_bytes.peak) / (1ull << 30);
#endif
  return 0;
}

void reset_peak_memory(const torch::Device& device) {
#ifdef VDT_HAS_CUDA_ALLOC
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#endif
}

double RunContext::mfu(double tflop_per_step, double s_per_step) const {
  if (!device.is_cuda() || tflop_per_step <= 0 || s_per_step <= 0) return 0;
  return tflop_per_step / s_per_step / kMfuPeakTflops;
}

void RunContext::reset_peak_memory() const { vdt::reset_peak_memory(device); }

uint32_t RunContext::checksum(const std::vector<torch::Tensor>& tensors) {
  uLong crc = 0;
  for (const auto& t : tensors) {
    const auto c = t.detach().to(torch::kCPU).contiguous();
    crc = ::crc32(crc, static_cast<const Bytef*>(c.data_ptr()), static_cast<uInt>(c.numel() * c.element_size()));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace vdt
