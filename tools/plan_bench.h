// `vdt bench plan`: measures the memory planner's cost table (train/plan/cost_table.h, docs/planner.md) for one preset
// on this device. A two-block model of the preset (random weights, the trainers' registry) runs forward + backward on
// random inputs at a few sizes under each checkpointing mode a trainer can pick: per block, the device bytes kept from
// forward to backward (the allocator's growth across the block's forward), the transient of backward (the peak above
// what the forward left), and the time (both blocks minus the first alone). Writes the rows into the table file,
// keeping its rows of other kinds. On a GPU also the copy costs of weight streaming (tools/copy_bench.h), the table's
// "copy". On the CPU the bytes are not measured (written as 0, memory_measured false), nor the copy costs.
// Not here: the plan (train/plan/memory_plan.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/loop/config_sections.h"
#include "train/plan/cost_table.h"

namespace vdt {

struct PlanBenchConfig {
  std::string model = "wan2.2-ti2v-5b";
  std::string training = "full";   // full (every weight trains: the SFT trainer) | lora (a frozen base)
  std::string attention = "full";  // full (bidirectional: the SFT trainer) | causal (6-chunk spans: the causal trainer)
  std::string frames;              // latent frames of each measured size, comma-separated; empty: full 5,11,21 /
                                   // causal 6,12,18
  int64_t height = 30, width = 52, text_len = 512;  // latent grid and text rows
  std::string precision = "bf16";                   // bf16 | fp32
  std::string device = "cuda";                      // cuda | cuda:N | cpu
  int64_t lora_rank = 32;                           // training lora
  int repeats = 3, warmup = 1;                      // timed runs (median) after warm-up runs, per mode and size
  std::string card;  // not a flag: the device's name as it reports it ("NVIDIA H200"); cpu: may stay empty
  std::string plans_dir = "plans";
  std::string out;                          // the table file; empty: <plans_dir>/<card_slug(card)>/<model>.json
  bool copy_only = false;                   // measure the copy costs only (a GPU), into the table that is there
  std::string measured;                     // not a flag: the commit and date recorded in the table
  std::vector<int64_t> frame_list() const;  // --frames parsed, or the defaults of --attention; throws naming the flag
  void validate() const;                    // throws naming the flag
  static const std::vector<ConfigField<PlanBenchConfig>>& fields();
};

struct PlanBenchResult {
  CostTable table;  // the file's table after the merge
  std::string path;
  std::vector<std::string> lines;  // one per measured row, fixed format
};

// Measures, merges into the table file and writes it. `log` (may be empty) receives each line as it is measured.
PlanBenchResult run_plan_bench(const PlanBenchConfig& cfg, const std::function<void(const std::string&)>& log = {});

}  // namespace vdt
