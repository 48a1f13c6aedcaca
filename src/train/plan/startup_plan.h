// The trainers' memory plan at start-up (docs/planner.md, "Using the planner from a trainer"): from the knobs the flags
// gave (MemoryFlags, parsed once by the trainer's config), the built model (before checkpointing is applied) and the
// run's shape, the typed knobs this rank runs with (train/plan/memory_knobs.h) and the plan that chose them. A trainer
// calls plan_memory once in its set-up, applies PlannedMemory::knobs, shows Plan::table_lines() in its start-up table
// and records plan_json() in its config.
// Not here: the search (train/plan/memory_plan.h), the tables (train/plan/cost_table.h), the flags (the trainers'
// configs, train/loop/config_sections.h).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/denoiser.h"
#include "train/plan/memory_knobs.h"
#include "train/plan/memory_plan.h"

namespace vdt {

// What the plan needs of a run besides the model: the rows each block runs on and what the fixed part depends on.
struct RunShape {
  std::string training = "full";  // full (every weight trains) | lora (a frozen base)
  int64_t chunks = 0;             // block-causal spans of this many chunks (the causal trainer); 0: bidirectional
  int64_t video_rows = 0;         // rows of one micro batch's residual stream besides the text (video tokens x batch,
                                  // a base's extra rows: H3's Picture 1 and audio)
  int64_t text_len = 0;           // text rows fed (in the rows for a base without cross-attention: H3)
  int64_t text_rows = 1;          // distinct captions one micro batch holds at most (cross-attention keys, values)
  bool fp32_masters = false;      // --precision mixed
  int64_t moment_bytes = 4;       // per AdamW moment
  int world = 1;
  bool zero2 = false;       // masters, moments and gradient sums sharded over the ranks
  int64_t shard_ranks = 1;  // ranks one copy of the frozen blocks is sharded over
  int64_t grad_accum = 1;
};

// What a run applies: the plan's knobs, or the flags' when nothing was planned.
struct PlannedMemory {
  MemoryKnobs knobs;
  std::optional<Plan> plan;  // empty: no budget (--memory auto on the CPU)
};

// The knobs of a run. Without a budget (--memory auto on the CPU) the flags' knobs as given, or their defaults. A
// costs table comes from plans_dirs() for the device's card (cost_table.h), else the analytic estimate. When nothing
// fits, whether the budget was given or auto: the planner's error, which names what would fit (a trainer plans before
// its weights load, so nothing is lost).
PlannedMemory plan_memory(Denoiser& model, const torch::Device& device, const RunShape& shape,
                          const MemoryFlags& flags);

// config.json's "memory_plan": the budget, the choices as flags, the predicted peak and s/step, the costs' source,
// and the table lines.
nlohmann::ordered_json plan_json(const Plan& plan);

// The device's name and memory (CUDA); {"cpu", 0} on the CPU.
struct DeviceMemoryInfo {
  std::string name;
  int64_t total_bytes = 0;
};
DeviceMemoryInfo device_memory_info(const torch::Device& device);

}  // namespace vdt
