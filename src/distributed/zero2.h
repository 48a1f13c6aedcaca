// ZeRO-2 (docs/design.md §6; Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models"), one implementation of the update path (distributed/grad_sync.h): every rank holds the compute weights;
// gradients are reduce-scattered in buckets while backward still runs (the gradient hooks of distributed/grad_hooks.h
// copy each gradient into its bucket and free it; buckets are sent in a fixed order so every rank issues the same
// collectives); each rank keeps only its slice of every bucket's fp32 (or bf16) master weights, AdamW moments and
// accumulated gradients; the gradient norm is summed across slices; the updated slices are all-gathered back into the
// compute weights. A bucket holds parameters of one optimizer group in reverse registration order (roughly backward
// order), is padded to a multiple of the world size, and rank r owns elements [r*s, (r+1)*s) of it. The slow reference
// is the replicated path on one rank; tests compare them. Not here: the collectives (communicator).
#pragma once
#include <nlohmann/json.hpp>

#include "distributed/grad_sync.h"

namespace vdt {

class GradHooks;

class Zero2 : public GradSync {
 public:
  // `params`: the trainable parameters by checkpoint name, holding the initial weights in the master dtype (fp32 with
  // opts.fp32_masters, else their own); they are copied into the slices here.
  Zero2(const NamedTensors& params, const GradSyncOptions& opts, Communicator& comm);
  ~Zero2() override;
  Zero2(const Zero2&) = delete;
  Zero2& operator=(const Zero2&) = delete;

  void attach(const NamedTensors& compute) override;
  void after_backward() override;  // sends what is left, waits, adds this rank's averaged slices
  torch::Tensor clip_grad_norm(double max_norm) override;
  void step(const torch::Tensor& found_inf) override;  // AdamW on the slices, then all-gather into compute weights
  // weights "master.bucketK", optimizer "exp_avg.bucketK", "exp_avg_sq.bucketK", "step.bucketK", meta
  // "zero2_layout" (the bucket layout, so any world size can load the slices).
  SyncState state() const override;
  void load(const FullTensorFn& full, int64_t optimizer_steps, const std::string& where) override;
  std::string describe() const override;
  AdamW& optimizer() override { return *opt_; }
  nlohmann::ordered_json layout() const;

  struct Bucket;

 private:
  void on_grad(size_t param);
  void launch(size_t bucket);
  void publish();

  Communicator& comm_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::pair<size_t, size_t>> slot_of_;  // compute parameter -> (bucket, index in bucket)
  std::unique_ptr<AdamW> opt_;
  torch::Tensor clip_;  // the clip coefficient for the next step (undefined: none)
  std::unique_ptr<GradHooks> hooks_;
};

}  // namespace vdt
