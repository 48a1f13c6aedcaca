// Frozen weights sharded over the ranks and gathered per module for compute (docs/design.md §5/§6: the causal trainer's
// frozen base blocks, "FSDP-sharded over the GPUs of a node" in the Python trainer). Per module and dtype, the
// parameters that need no gradient are flattened into one buffer padded to a multiple of the world size; this rank
// keeps its slice only. gather() all-gathers the buffer and points the parameters at views of it; release() points them
// at empty tensors again. With prefetch (the default) gather() also starts the asynchronous all-gather of the module
// that comes next in the direction of travel (modules in order: forward 0, 1, ...; the checkpoint recompute in backward
// N-1, N-2, ...), so communication overlaps the current module's compute and at most two modules are whole at a time.
// Every rank must gather in the same order (one model, one traversal). Parameters that require grad (a LoRA's factors)
// are left alone: they stay whole and replicated. Weight streaming (distributed/weight_stream.h) of a sharded base:
// the shards of `host_blocks` live in host memory (pinned on a GPU) and are copied to the device on their way into
// the all-gather, so each rank streams its own shard of those blocks. Not here: when to gather (the trainer calls
// gather/release around every run of a block, distributed/activation_checkpoint).
#pragma once
#include <torch/nn/module.h>

#include <unordered_map>
#include <vector>

#include "distributed/communicator.h"

namespace vdt {

class BlockShards {
 public:
  // Shards every frozen parameter of `modules` (whose data must be whole and equal on every rank) and releases them.
  // host_blocks: indices into `modules` whose shards live in host memory.
  BlockShards(std::vector<torch::nn::Module*> modules, Communicator& comm, bool prefetch = true,
              const std::vector<int64_t>& host_blocks = {});
  void gather(const torch::nn::Module& m);              // no-op when already gathered
  void release(const torch::nn::Module& m);             // no-op when not gathered
  int64_t shard_bytes() const { return shard_bytes_; }  // held by this rank
  int64_t full_bytes() const { return full_bytes_; }    // the whole of the sharded weights
  int64_t host_bytes() const { return host_bytes_; }    // of shard_bytes, those in host memory (host_blocks)

 private:
  struct Flat {
    std::vector<torch::Tensor> params;  // the parameters, in order
    std::vector<std::vector<int64_t>> shapes;
    int64_t numel = 0, padded = 0;
    torch::Tensor shard;                // [padded / world]; in host memory for a streamed block
    torch::Device device{torch::kCPU};  // where the parameters compute
  };
  struct Entry {
    std::vector<Flat> flats;  // one per dtype
    bool gathered = false;
    int64_t index = 0;
  };
  struct Pending {  // a prefetch in flight
    int64_t index = -1;
    std::vector<torch::Tensor> full;  // per flat
    std::vector<WorkPtr> works;
  };
  Entry& entry(const torch::nn::Module& m);
  Pending start_gather(int64_t index);
  void bind(Entry& e, Pending& p);
  Communicator& comm_;
  bool prefetch_;
  std::vector<Entry*> order_;
  std::unordered_map<const torch::nn::Module*, Entry> entries_;
  Pending pending_;
  int64_t last_ = -1;
  int64_t shard_bytes_ = 0, full_bytes_ = 0, host_bytes_ = 0;
};

}  // namespace vdt
