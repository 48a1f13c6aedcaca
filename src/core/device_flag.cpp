#include "core/device_flag.h"

#include <torch/cuda.h>

#include <cstdlib>

#include "core/error.h"

namespace vdt {
namespace {

std::string visible_env() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? std::string("CUDA_VISIBLE_DEVICES=") + v : "CUDA_VISIBLE_DEVICES unset";
}

}  // namespace

DeviceFlag parse_device_flag(const std::string& value, const std::string& flag) {
  DeviceFlag d;
  if (value == "auto") return d;
  if (value == "cpu") return d.kind = DeviceFlag::Kind::kCpu, d;
  d.kind = DeviceFlag::Kind::kCuda;
  if (value == "cuda") return d;
  const std::string digits = value.rfind("cuda:", 0) == 0 ? value.substr(5) : "";
  const bool ok = !digits.empty() && digits.size() <= 4 && digits.find_first_not_of("0123456789") == std::string::npos;
  VDT_CHECK(ok, flag, " '", value, "': expected auto, cpu, cuda or cuda:N (N a GPU index such as cuda:1)");
  d.index = std::stoi(digits);
  return d;
}

c10::Device resolve_device(const std::string& value, int local_rank, int world, int visible_gpus,
                           const std::string& flag) {
  const DeviceFlag d = parse_device_flag(value, flag);
  if (d.kind == DeviceFlag::Kind::kCpu || (d.kind == DeviceFlag::Kind::kAuto && visible_gpus == 0))
    return c10::Device(c10::kCPU);
  VDT_CHECK(visible_gpus > 0, flag, " ", value, ": no CUDA device is visible (", visible_env(), ")\n---> HINT: use ",
            flag, " cpu, or check the driver and CUDA_VISIBLE_DEVICES");
  VDT_CHECK(d.index < 0 || world == 1, flag, " ", value, " names one GPU for all ", world,
            " ranks of this launch\n---> HINT: use ", flag,
            " cuda: each rank takes the GPU of its LOCAL_RANK; choose the GPUs with CUDA_VISIBLE_DEVICES");
  const std::string seen = std::to_string(visible_gpus) + " CUDA device(s) are visible (indices 0.." +
                           std::to_string(visible_gpus - 1) + "; " + visible_env() + ")";
  VDT_CHECK(d.index < visible_gpus, flag, " ", value, ": GPU ", d.index, " is not visible: ", seen,
            "\n---> HINT: indices count the GPUs left visible by CUDA_VISIBLE_DEVICES, from 0");
  VDT_CHECK(d.index >= 0 || local_rank < visible_gpus, flag, " ", value, ": LOCAL_RANK ", local_rank, " takes GPU ",
            local_rank, ", but ", seen,
            "\n---> HINT: start at most one rank per visible GPU (torchrun --nproc_per_node)");
  const int index = d.index >= 0 ? d.index : local_rank;
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

c10::Device resolve_device(const std::string& value, int local_rank, int world, const std::string& flag) {
  // Parse first so a misspelling is reported as such, before the GPU count is queried.
  parse_device_flag(value, flag);
  return resolve_device(value, local_rank, world, static_cast<int>(torch::cuda::device_count()), flag);
}

}  // namespace vdt
