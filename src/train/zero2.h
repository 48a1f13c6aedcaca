// ZeRO-2 (SPEC §6; Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"):
// every rank holds the compute weights; gradients are reduce-scattered in buckets while backward still runs (a post
// hook on each parameter's gradient accumulator copies the gradient into its bucket and frees it; a full bucket is
// sent at once, buckets in a fixed order so every rank issues the same collectives); each rank keeps only its slice
// of every bucket's fp32 (or bf16) master weights, AdamW moments and accumulated gradients; the gradient norm is
// summed across slices; the updated slices are all-gathered back into the compute weights.
// A bucket holds parameters of one optimizer group in reverse registration order (roughly backward order), is padded
// to a multiple of the world size, and rank r owns elements [r*s, (r+1)*s) of it.
// The slow reference is the replicated path (master_weights.h + AdamW on one rank); tests compare them.
// Not here: the collectives (dist/), the training loop.
#pragma once
#include <torch/types.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "train/optimizer.h"
#include "train/train_state.h"

namespace vdt {

struct Zero2Group {
  std::string name;
  std::function<bool(const std::string&)> contains;
  double lr = 1e-5, weight_decay = 0.01;
};

class Zero2 {
 public:
  // `params`: the model's parameters by checkpoint name, holding the initial weights in master_dtype; they are
  // copied into the slices here, so the caller may cast the model to the compute dtype afterwards.
  Zero2(const NamedTensors& params, const std::vector<Zero2Group>& groups, Communicator& comm,
        torch::ScalarType master_dtype, AdamWConfig opt, int64_t bucket_numel = int64_t{1} << 25);
  ~Zero2();
  Zero2(const Zero2&) = delete;
  Zero2& operator=(const Zero2&) = delete;

  // Registers the gradient-accumulator hooks on the compute parameters (after the model's final dtype cast).
  void attach(const NamedTensors& compute_params);
  // After a micro batch's backward: sends the buckets not sent yet, waits for all, adds this rank's slices
  // (averaged over ranks) into the accumulated gradients.
  void finish_micro();
  // Global L2 norm of the accumulated gradient (all slices), clipped to max_norm (<= 0: measure only).
  torch::Tensor clip_grad_norm(double max_norm);
  // AdamW on the slices (skipped on the device when found_inf != 0), then all-gathers them into the compute weights.
  void step(const torch::Tensor& found_inf);
  AdamW& optimizer() { return *opt_; }

  // Sharded state: this rank's slices as "master.bucketK", "exp_avg.bucketK", "exp_avg_sq.bucketK", "step.bucketK",
  // with the bucket layout (JSON) to put into every shard file's metadata.
  NamedTensors state_tensors() const;
  nlohmann::ordered_json layout() const;
  // Loads master weights and moments given per-parameter full tensors (any source, any world size): weight(name),
  // exp_avg(name), exp_avg_sq(name); step is the optimizer step count.
  void load(const std::function<torch::Tensor(const std::string& kind, const std::string& name)>& full, int64_t step);
  // Writes the current masters (cast to the compute dtype) into the compute parameters (after load()).
  void publish();

  struct Bucket;

 private:
  void on_grad(size_t bucket, size_t slot);
  void launch_ready();
  void launch(size_t k);

  Communicator& comm_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::unique_ptr<AdamW> opt_;
  size_t next_launch_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_ids_;
};

}  // namespace vdt
