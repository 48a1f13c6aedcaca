// The trainers' memory plan at start-up (docs/planner.md, "Using the planner from a trainer"): from --memory, the
// built model (before checkpointing is applied), the run's shape and the flags the user gave, this rank's plan, its
// choices written into the sections that hold the flags. A trainer calls plan_memory once in its set-up, then shows
// Plan::table_lines() in its start-up table and records plan_json() in its config.
// Not here: the search (train/plan/memory_plan.h), the tables (train/plan/cost_table.h), the flags
// (train/loop/config_sections.h).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/denoiser.h"
#include "train/loop/config_sections.h"
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

// The sections whose flags the plan sets (the causal trainer's two stay null for a trainer without them), the
// checkpointing modes the trainer offers and its resolved mode, and whether that mode was fixed by another flag (the
// SFT trainer's --no-gradient_checkpointing).
struct PlanTargets {
  MemorySection* memory = nullptr;
  CausalMemorySection* causal_memory = nullptr;
  AttentionSection* attention = nullptr;
  Checkpointing mode = Checkpointing::block;
  bool allow_none = true;
  bool mode_given = false;
};

// The plan for this rank, applied to `targets`; std::nullopt and nothing changed when there is no budget (--memory
// auto on the CPU: the flags as given, or their defaults). A costs table comes from plans_dirs() for the device's
// card (cost_table.h), else the analytic estimate. When nothing fits: with --memory given, the planner's error (it
// names what would fit); with --memory auto left as the default, that message as a warning on rank 0's console and the
// flags as given. `rank`: only rank 0 prints.
std::optional<Plan> plan_memory(Denoiser& model, const torch::Device& device, const RunShape& shape,
                                const PlanTargets& targets, int rank = 0);

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
