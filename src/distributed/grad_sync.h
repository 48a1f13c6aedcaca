// The update path of a trainer, whatever the parallelism (torchtitan's OptimizersContainer, llm.c's
// gpt2_update(..., &multi_gpu_config)): gradients synchronised after each micro batch's backward, the global norm
// clipped, AdamW (skipped on the device when the loss or norm is non-finite), the compute weights refreshed, and the
// state by name for the checkpointer. The loops call these five things and never ask which implementation runs:
//   replicated       one rank: AdamW on the parameters, or on fp32 masters of bf16 compute weights (mixed precision);
//   zero2            several ranks, full training: ZeRO-2 (distributed/zero2.h), sharded masters, moments, gradients;
//   replicated over ranks  several ranks, a few trainable parameters (a LoRA over a sharded frozen base): every rank
//                    holds them whole, each gradient is all-reduced (mean) as backward produces it.
// All hooks go through distributed/grad_hooks.h, so every rank launches its collectives in the same order.
// Not here: which parameters train or their learning-rate schedule (the trainers).
#pragma once
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "distributed/communicator.h"
#include "optim/optimizer.h"

namespace vdt {

struct ParamGroupSpec {
  std::string name;
  std::function<bool(const std::string&)> contains;  // by checkpoint name
  double lr = 1e-5, weight_decay = 0.01;
};

struct GradSyncOptions {
  std::vector<ParamGroupSpec> groups;  // every trainable parameter in exactly one group
  AdamWConfig adamw;
  bool fp32_masters = false;     // bf16 compute weights with fp32 masters (SFT --precision mixed)
  bool shard_optimizer = false;  // several ranks: ZeRO-2 instead of replicated parameters
  int64_t bucket_numel = int64_t{1} << 25;
  // Replicated over several ranks: each gradient all-reduced once backward has finished instead of as it is produced
  // (a parameter used in several passes of one backward under block checkpointing, such as a rollout's chunks, gets
  // a gradient in each pass's recompute; hooks would see it more than once).
  bool reduce_after_backward = false;
};

// What the checkpointer writes for the update path: the optimizer-side weights (masters when there are masters;
// a ZeRO-2 rank's bucket slices) and the AdamW state, with metadata for every shard file (the ZeRO-2 layout).
struct SyncState {
  NamedTensors weights, optimizer;
  Metadata meta;
};

// A parameter's full tensor of `kind` ("weight", "exp_avg", "exp_avg_sq") whatever layout wrote it.
using FullTensorFn = std::function<torch::Tensor(const std::string& kind, const std::string& name)>;

class GradSync {
 public:
  virtual ~GradSync() = default;
  // After the cast of the model to its compute dtype: hooks on the compute parameters (same names as at build).
  virtual void attach(const NamedTensors& compute) = 0;
  // After each micro batch's backward: this rank's gradients folded into the synchronised ones.
  virtual void after_backward() = 0;
  // The global L2 norm over every rank's gradient (0-dim float32 on the device, no host sync), clipped to max_norm
  // (<= 0: measure only) by the next step(): the coefficient is applied inside AdamW's kernel, not in a pass of its
  // own.
  virtual torch::Tensor clip_grad_norm(double max_norm) = 0;
  // AdamW (skipped on the device when found_inf != 0), compute weights refreshed, gradients cleared.
  virtual void step(const torch::Tensor& found_inf) = 0;
  virtual SyncState state() const = 0;
  // Weights and moments from per-parameter full tensors (any world size), then the compute weights refreshed.
  virtual void load(const FullTensorFn& full, int64_t optimizer_steps, const std::string& where) = 0;
  virtual std::string describe() const = 0;
  virtual AdamW& optimizer() = 0;
  void set_lr(size_t group, double lr) { optimizer().groups().at(group).lr = lr; }
  double lr(size_t group) { return optimizer().groups().at(group).lr; }
};

// `params`: the trainable parameters by checkpoint name, holding their initial values in the master dtype (the
// caller may cast the model afterwards, then calls attach()). One rank: replicated; several: ZeRO-2 when
// opts.shard_optimizer, else replicated over ranks.
std::unique_ptr<GradSync> make_grad_sync(const NamedTensors& params, const GradSyncOptions& opts, Communicator& comm);

}  // namespace vdt
