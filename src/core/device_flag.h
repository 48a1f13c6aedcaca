// The --device flag of every command: auto, cpu, cuda or cuda:N (N counts the GPUs left visible by
// CUDA_VISIBLE_DEVICES, as in PyTorch). Parsing checks the spelling only (configs validate without a GPU); resolving
// checks what is visible and applies the launcher's rule: under torchrun / Slurm each rank takes the GPU of its
// LOCAL_RANK, so cuda:N (one GPU for every rank) is an error there.
// Not here: moving models or tensors (the callers do), multi-node placement (the launcher's).
#pragma once
#include <c10/core/Device.h>

#include <string>

namespace vdt {

struct DeviceFlag {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // cuda:N -> N; -1: not given (cuda, auto, cpu)
};

// Throws naming `flag` and the value when it is not auto / cpu / cuda / cuda:N.
DeviceFlag parse_device_flag(const std::string& value, const std::string& flag = "--device");

// The device this process runs on. `local_rank` / `world`: the launcher's (LaunchEnv; 0 / 1 for one process).
//   cpu -> CPU;  auto -> cuda when a GPU is visible, else CPU;  cuda -> GPU `local_rank`;  cuda:N -> GPU N (world 1).
// Errors name the flag, the value, how many GPUs are visible and CUDA_VISIBLE_DEVICES.
c10::Device resolve_device(const std::string& value, int local_rank = 0, int world = 1,
                           const std::string& flag = "--device");
// The same with the number of visible GPUs given (tests on machines without one).
c10::Device resolve_device(const std::string& value, int local_rank, int world, int visible_gpus,
                           const std::string& flag);

}  // namespace vdt
