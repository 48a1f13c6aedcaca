// `vdt bench plan`'s copy costs (train/plan/cost_table.h CopyCosts), measured on one GPU: the rate of a copy from
// pinned host memory to the device, how much of it hides under compute (a GEMM loop alone, the copy alone, and both
// at once on two streams), and the rate of an FP8 base's dequantization (distributed/fp8_base.h). What weight
// streaming costs a step follows from these (docs/planner.md). Not here: the per-block rows (tools/plan_bench.h).
#pragma once
#include <torch/types.h>

#include <string>

#include "train/plan/cost_table.h"

namespace vdt {

// Throws on a device that is not a GPU (the CPU keeps the defaults).
CopyCosts measure_copy_costs(const torch::Device& device);
// "copy h2d 24.1 GB/s overlap 0.93 dequant 1210 GB/s": the bench's line.
std::string describe_copy_costs(const CopyCosts& c);

}  // namespace vdt
