// The memory planner (docs/planner.md): from a rank's memory budget, the fixed part of its peak (weights, optimizer
// state, gradients), the geometry (blocks, rows per block) and a cost table (train/plan/cost_table.h), the fastest
// choice of --checkpointing (none / selective with k blocks / block), --attn-keep, --act-offload and --attn whose
// predicted peak and margin fit; the choices the user fixed are kept and the plan fills the rest. A pure function: no
// device, no files. Never picks FP8 (--fp8 stays the user's). Not here: the flags (the trainers bind them), the tables.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "train/plan/cost_table.h"
#include "train/plan/memory_knobs.h"

namespace vdt {

// What a rank holds whatever the activations, from parameter counts and dtypes (docs/planner.md, "The fixed part").
struct FixedMemoryInputs {
  int64_t trainable_params = 0;     // what the optimizer updates (full training: every weight; LoRA: the factors)
  int64_t frozen_params = 0;        // weights that do not train (a LoRA's base), blocks included
  int64_t frozen_block_params = 0;  // of frozen_params, those in the blocks (what a sharded base shards)
  int64_t blocks = 0;
  int64_t compute_bytes = 2;    // per model weight (bf16 2, fp32 4)
  int64_t trainable_bytes = 0;  // per trainable weight when it differs (a float32 LoRA: 4); 0: compute_bytes
  bool fp32_masters = false;    // --precision mixed: fp32 masters and fp32 gradient sums
  int64_t moment_bytes = 4;     // per AdamW moment (two of them)
  int64_t world = 1;            // ranks
  bool zero2 = false;           // full training over ranks: masters, moments and gradient sums sharded (ZeRO-2)
  int64_t shard_ranks = 1;      // ranks one copy of the frozen blocks is sharded over (1: not sharded)
  int64_t grad_accum = 1;
  int64_t other_bytes = 0;  // anything else resident (the batch, text rows, RoPE tables)
};

struct FixedMemory {
  int64_t static_bytes = 0;          // held through the whole step
  int64_t grad_bytes = 0;            // gradients that grow through backward and are freed after it (docs/planner.md)
  int64_t after_backward_bytes = 0;  // held from the end of backward to the step (one rank's fp32 gradient sums)
  std::vector<std::pair<std::string, int64_t>> parts;  // name -> bytes, for the start-up table
};
FixedMemory fixed_memory(const FixedMemoryInputs& in);

// `--memory auto`: the device's memory less kAutoReserve (CUDA context, NCCL, cuBLAS workspaces and the allocator's
// fragmentation, none of which the allocator's counter sees) or 3 % of it, whichever is larger.
inline constexpr int64_t kAutoReserve = int64_t{2} << 30;
int64_t auto_budget_bytes(int64_t device_total_bytes);
// `--memory auto|GiB` -> bytes; throws naming the flag. `device_total_bytes` <= 0 (no GPU) with auto: throws.
int64_t parse_memory_budget(const std::string& value, int64_t device_total_bytes, const std::string& flag = "--memory");

struct PlanRequest {
  int64_t budget_bytes = 0;  // what one rank may use (parse_memory_budget)
  std::string budget_note;   // how the budget was set, for the table ("auto: 139.8 GiB less 4.2 GiB")
  FixedMemory fixed;
  int64_t blocks = 0, rows = 0;   // blocks of the base, rows of each block's residual stream
  int64_t text_rows = 0;          // distinct captions a window holds at most (cross-attention: Wan); 0: as measured
  std::string training = "full";  // full | lora: which rows of the table
  bool causal = false;            // block-causal spans: --attn, --attn-keep apply (else attention is full)
  bool allow_none = true;         // the trainer can run without checkpointing (the causal trainer cannot)
  bool allow_offload = false;     // the trainer has --act-offload
  int64_t world = 1;              // for the advice when nothing fits
  PlanChoices given;
  MemoryKnobs knobs;  // the knobs the plan does not choose (precision, FP8) go through to Plan::knobs as they are
};

struct Plan {
  MemoryKnobs knobs;       // the choices, given or planned, with the request's other knobs
  bool causal = false;     // block-causal spans: knobs.attn and knobs.attn_keep apply
  int64_t peak_bytes = 0;  // predicted: fixed + activations + transient (the margin not included)
  int64_t budget_bytes = 0;
  int64_t host_bytes = 0;   // pinned host memory the offload takes
  double step_seconds = 0;  // predicted
  // the prediction's parts: fixed (static), activations (kept or gradients, whichever is larger through backward),
  // transient (one block's backward); and the margin a plan keeps free beside its peak: peak + margin fits the budget
  int64_t fixed_bytes = 0, activation_bytes = 0, transient_bytes = 0, margin_bytes = 0;
  std::string costs;  // the table's source
  bool extrapolated = false;
  std::vector<std::pair<std::string, std::string>> why;  // flag -> value and why, in table order
  std::string budget_note;
  // The start-up table's lines: each choice with its reason, the predicted peak and s/step.
  std::vector<std::string> table_lines() const;
  // The plan as flags ("--checkpointing selective --selective-blocks 8 --act-offload on ...").
  std::string flags() const;
};

// The fastest candidate whose predicted peak and margin fit the budget (ties: the smaller peak). Throws when none fits,
// naming what would (--act-offload on, more GPUs, fewer rows, a larger --memory), or when a given choice contradicts
// the trainer or has no row in the table.
Plan make_plan(const PlanRequest& req, const CostTable& costs);

}  // namespace vdt
