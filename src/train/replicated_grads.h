// Gradients of replicated parameters (the causal trainer's LoRA factors, SPEC §5) averaged over the ranks as
// backward produces them: a post-accumulate hook on each parameter launches an asynchronous all-reduce of its
// gradient the moment it is complete (inside the checkpoint recompute of its block), so communication overlaps the
// rest of backward; finish() waits for all of them and divides by the world size. Every rank launches in the same
// order (the autograd engine's order is deterministic for one graph), which NCCL needs. A parameter that received no
// gradient on this rank still takes part, with zeros, so the ranks never disagree on the collectives.
// Not here: clipping and the update (train/optimizer.h).
#pragma once
#include <torch/types.h>

#include <torch/csrc/autograd/function.h>

#include <mutex>
#include <vector>

#include "dist/communicator.h"

namespace vdt {

class ReplicatedGrads {
 public:
  ReplicatedGrads(std::vector<torch::Tensor> params, Communicator& comm);
  ~ReplicatedGrads();
  ReplicatedGrads(const ReplicatedGrads&) = delete;
  ReplicatedGrads& operator=(const ReplicatedGrads&) = delete;
  // After backward: every gradient is the mean over the ranks (world 1: unchanged).
  void finish();

 private:
  void on_grad(size_t i);
  std::vector<torch::Tensor> params_;
  Communicator& comm_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_ids_;
  std::vector<WorkPtr> works_;
  std::vector<bool> sent_;
  std::mutex mu_;
};

}  // namespace vdt
