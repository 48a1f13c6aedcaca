// Frozen weights sharded over the ranks and gathered per module for compute (SPEC §5/§6: the causal trainer's frozen
// base blocks, "FSDP-sharded over the GPUs of a node" in the seed). Per module and dtype, the parameters that need no
// gradient are flattened into one buffer padded to a multiple of the world size; this rank keeps its slice only.
// gather() all-gathers the buffer and points the parameters at views of it; release() points them at empty tensors
// again, so at most the modules between a gather and its release are whole in memory. Parameters that require grad
// (a LoRA's factors) are left alone: they stay whole and replicated.
// Not here: when to gather (the trainer calls gather/release around every run of a block, train/activation_checkpoint).
#pragma once
#include <torch/nn/module.h>

#include <unordered_map>
#include <vector>

#include "dist/communicator.h"

namespace vdt {

class BlockShards {
 public:
  // Shards every frozen parameter of `modules` (whose data must be whole and equal on every rank) and releases them.
  BlockShards(std::vector<torch::nn::Module*> modules, Communicator& comm);
  void gather(const torch::nn::Module& m);   // no-op when already gathered
  void release(const torch::nn::Module& m);  // no-op when not gathered
  int64_t shard_bytes() const { return shard_bytes_; }  // held by this rank
  int64_t full_bytes() const { return full_bytes_; }    // the whole of the sharded weights

 private:
  struct Flat {
    std::vector<torch::Tensor> params;  // the parameters, in order
    std::vector<std::vector<int64_t>> shapes;
    int64_t numel = 0, padded = 0;
    torch::Tensor shard;  // [padded / world]
  };
  struct Entry {
    std::vector<Flat> flats;  // one per dtype
    bool gathered = false;
  };
  Entry& entry(const torch::nn::Module& m);
  Communicator& comm_;
  std::unordered_map<const torch::nn::Module*, Entry> entries_;
  int64_t shard_bytes_ = 0, full_bytes_ = 0;
};

}  // namespace vdt
