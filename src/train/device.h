// The device a trainer runs on, from its --device flag (auto, cpu, cuda) and the process's GPU (LOCAL_RANK).
#pragma once
#include <c10/core/Device.h>

#include <string>

namespace vdt {

// auto: cuda:index when CUDA is visible, else cpu; cuda without a visible GPU is an error naming the flag.
c10::Device training_device(const std::string& flag, int index);

}  // namespace vdt
