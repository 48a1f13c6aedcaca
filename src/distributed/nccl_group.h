// NCCL through c10d (docs/design.md §6): a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 hosts it, or
// torchrun's agent does), then ProcessGroupNCCL on this rank's GPU (LOCAL_RANK). Built when LibTorch has CUDA and NCCL
// (VDT_WITH_NCCL); otherwise make_nccl_group is an error that says so. Not here: environment parsing
// (communicator.h).
#pragma once
#include <memory>

#include "distributed/communicator.h"

namespace vdt {

std::unique_ptr<Communicator> make_nccl_group(const LaunchEnv& env, const torch::Device& device);

}  // namespace vdt
