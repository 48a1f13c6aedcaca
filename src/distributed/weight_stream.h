// Where a built model's frozen block weights live between uses, applied from outside (docs/planner.md, "Streaming and
// the FP8 base"): the frozen weights of the streamed blocks in pinned host memory, copied to the device on a side
// stream ahead of use (`prefetch` streamed blocks ahead in the direction of travel: forward 0, 1, ...; the checkpoint
// recompute N-1, N-2, ...) and dropped after; with an FP8 base, the frozen 2-D block weights (Linears) stored as E4M3
// with a scale per output channel (distributed/fp8_base.h), on the device or, streamed, on the host, and dequantized
// into the compute dtype at each use. gather() makes a block's frozen weights whole on the device, release() empties
// them again: the trainer calls them around each run of a block (forward, recompute and its backward: the checkpoint
// runner's before/after hooks), generation around each call (wrap_block_runner). Parameters that train (a LoRA's
// factors) and everything outside the blocks stay where they are. On the CPU the "host" is the CPU too: the stored
// copy lives apart from the parameters and is copied in for each use, so the tests run the same path.
// Not here: which blocks or dtype (the memory plan), sharded bases (distributed/block_shards.h streams its shards).
#pragma once
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "distributed/fp8_base.h"
#include "model/denoiser.h"

namespace vdt {

struct WeightStreamOptions {
  std::vector<int64_t> streamed;  // blocks (indices in forward order) whose frozen weights live in host memory
  int64_t prefetch = 1;           // streamed blocks copied ahead of use (>= 1)
  // The order of use after the last block: training turns back (forward 0..N-1, then the recompute N-1..0: the last
  // block stays gathered across the turn), generation starts again at block 0 (wraps).
  bool wraps = false;
  bool fp8_base = false;  // the frozen block linears (stored_as_fp8) as E4M3 + per-channel scales
  // codes made earlier (load_fp8_base: by parameter name) instead of quantizing the model's weights
  std::map<std::string, Fp8Weight> fp8_codes;
};

// The blocks to stream: `n` of `blocks`, spread evenly (each copy then has the compute of the resident blocks
// between two streamed ones to hide under), ascending.
std::vector<int64_t> streamed_block_indices(int64_t blocks, int64_t n);

class WeightStream;
// Wraps the model's block runner so that each call gathers its block before and releases it after (generation: no
// backward; a trainer uses the checkpoint runner's before/after hooks instead, whose recompute and backward come
// later). The runner holds `stream`.
void wrap_block_runner(Denoiser& model, std::shared_ptr<WeightStream> stream);

class WeightStream {
 public:
  // Takes the frozen weights of `model`'s blocks as `opts` says (the blocks neither streamed nor FP8 are left alone)
  // and empties those parameters; the stored copies go to `device` (resident) or to host memory (streamed; pinned
  // when `device` is a GPU). The model's weights must be whole (not sharded) and frozen where they do not train
  // (after attach_lora).
  WeightStream(Denoiser& model, const torch::Device& device, WeightStreamOptions opts);
  ~WeightStream();
  void gather(const torch::nn::Module& block);   // no-op when gathered, or for a block it does not hold
  void release(const torch::nn::Module& block);  // no-op when not gathered

  int64_t host_bytes() const { return host_bytes_; }      // pinned host memory held (the streamed blocks)
  int64_t device_bytes() const { return device_bytes_; }  // device memory of the stored resident FP8 codes
  int64_t streamed_blocks() const { return streamed_count_; }
  int64_t copies() const { return copies_; }  // host-to-device copies started so far (blocks)
  std::string describe() const;               // the start-up line

 private:
  struct Store;
  struct Entry;
  struct InFlight;
  Entry* entry(const torch::nn::Module& m);
  void start_copy(int64_t index);
  void prefetch_from(int64_t index);
  std::vector<int64_t> upcoming(int64_t index) const;  // the blocks used after `index`, in order
  torch::Device device_;
  WeightStreamOptions opts_;
  std::vector<std::unique_ptr<Entry>> order_;  // every block, in forward order
  std::unordered_map<const torch::nn::Module*, Entry*> entries_;
  std::map<int64_t, std::unique_ptr<InFlight>> in_flight_;
  std::vector<int64_t> streamed_;  // ascending
  int64_t last_ = -1;
  bool up_ = true;  // the direction of travel
  int64_t host_bytes_ = 0, device_bytes_ = 0, streamed_count_ = 0, copies_ = 0, n_fp8_ = 0;
};

}  // namespace vdt
