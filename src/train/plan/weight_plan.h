// The memory plan's weight choices (docs/planner.md, "Streaming and the FP8 base"): how many blocks' frozen weights
// stream from host memory, how far ahead, and whether the frozen block linears are stored as FP8, around the
// activation search of memory_plan.h: each weight candidate changes the fixed part and adds its copy and
// dequantization time, and the activation plan that fits beside it is searched; the fastest total wins. FP8 is a
// candidate only with --base-dtype fp8, or auto when no bf16 candidate fits (said so in the plan's lines). A pure
// function, as make_plan. Not here: the mechanism (distributed/weight_stream.h), the flags.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distributed/fp8_base.h"
#include "train/plan/cost_table.h"
#include "train/plan/memory_plan.h"

namespace vdt {

// The frozen block weights of one rank, per block (the plan's unit): what they weigh in the compute dtype and stored
// as FP8 (E4M3 codes of the 2-D weights, their scales, the rest in the compute dtype).
struct BlockWeights {
  int64_t blocks = 0;
  int64_t bytes = 0;        // one block's frozen weights in the compute dtype
  int64_t fp8_bytes = 0;    // the same stored as FP8
  bool streamable = false;  // a frozen base (LoRA training): full-parameter training keeps its weights on the GPU
};

struct WeightPlan {
  int64_t streamed_blocks = 0, prefetch = 1;
  bool fp8_base = false;
  bool fp8_because_bf16_cannot = false;  // --base-dtype auto turned FP8 on
  int64_t device_bytes = 0;  // the frozen block weights on the device at most (resident, in flight, gathered)
  int64_t host_bytes = 0;    // pinned host memory of the streamed blocks
  double seconds = 0;        // what streaming and dequantization add to a step (predicted)
  std::vector<std::pair<std::string, std::string>> why;  // flag -> value and why, for the start-up table
};

// Device bytes of the frozen block weights for a choice (docs/planner.md): the resident blocks as stored, the
// streamed blocks in flight (prefetch) and the one in use, and with FP8 one block dequantized.
int64_t weight_device_bytes(const BlockWeights& w, int64_t streamed, int64_t prefetch, bool fp8);
// Seconds streaming and dequantization add to a step whose blocks take `block_seconds` (forward, recompute and
// backward of all of them): per pass (forward: a third; recompute + backward: two thirds) the copies' bandwidth and
// their latency ahead of use, less the share the card overlaps with compute; plus every dequantization.
double weight_seconds(const BlockWeights& w, int64_t streamed, int64_t prefetch, bool fp8, double block_seconds,
                      const CopyCosts& copy);

// A --memory budget above what `auto` uses on this device (its memory less the reserve, auto_budget_bytes) is not
// planned for as if it were there: auto's budget, with `note` saying so. A device of unknown memory (<= 0: the CPU)
// keeps the budget as given.
int64_t clamp_budget(int64_t budget, int64_t device_total, const std::string& device_name, std::string* note);

// The fastest weight choice and activation plan that fit req's budget together, keeping the weight choices req.given
// fixes (PlanChoices: stream_blocks, stream_prefetch, base_dtype); the plan's knobs carry the choice. req.fixed counts
// every frozen block weight resident in the compute dtype (fixed_memory's); its weights part is replaced per candidate.
// Throws as make_plan when nothing fits, naming the smallest budget that any candidate (all blocks streamed, FP8 where
// allowed) needs, or a given weight choice that contradicts the run.
Plan make_weight_plan(const PlanRequest& req, const BlockWeights& w, const CostTable& costs, WeightPlan* out);

}  // namespace vdt
