// The trainers' memory plan at start-up (startup_plan.h): the request from the built model and the run's shape, the
// cost table for this card (or the analytic estimate), the typed knobs the run applies.
#include "train/plan/startup_plan.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "train/plan/cost_table.h"
#include "train/plan/weight_plan.h"

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)  // LibTorch with CUDA (as train/loop/run_context.cpp)
#include <ATen/cuda/CUDAContext.h>
#define VDT_PLAN_DEVICE_PROPERTIES 1
#endif

namespace vdt {
namespace {

constexpr double kBytesPerGiB = double(int64_t{1} << 30);
// The analytic estimate's sustained bf16 rate: about 40 % of a current datacenter GPU's dense peak (the H200's
// 989 TFLOP/s). It orders the candidates; a measured table replaces it (docs/planner.md, "No table for the card").
constexpr double kAnalyticTflops = 400;

std::string gib_text(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", bytes / kBytesPerGiB);
  return b;
}

// Parameter counts as the fixed part takes them: trainable (requires grad), frozen, and frozen in the blocks, with
// the bytes of a trainable weight (a float32 LoRA beside a bf16 base: 4).
FixedMemoryInputs parameter_counts(Denoiser& model) {
  FixedMemoryInputs in;
  for (const auto& p : model.parameters()) {
    if (p.requires_grad()) {
      in.trainable_params += p.numel();
      in.trainable_bytes = static_cast<int64_t>(p.element_size());
    } else {
      in.frozen_params += p.numel();
    }
  }
  const auto blocks = model.block_modules();
  for (auto* b : blocks)
    for (const auto& p : b->parameters()) in.frozen_block_params += p.requires_grad() ? 0 : p.numel();
  in.blocks = static_cast<int64_t>(blocks.size());
  in.compute_bytes = static_cast<int64_t>(c10::elementSize(model.compute_dtype()));
  return in;
}

// This card's table with rows of the run's kind, its bytes estimated when it has none (measured on the CPU);
// else the analytic estimate.
CostTable costs_for(Denoiser& model, const std::string& card, const RunShape& shape, const ModelDims& dims,
                    int64_t rows) {
  const bool causal = shape.chunks > 0;
  const auto estimate = [&] {
    return analytic_cost_table(dims, shape.training, shape.chunks, {rows}, kAnalyticTflops);
  };
  const std::string path = find_cost_table(plans_dirs(), card, model.preset());
  if (path.empty()) return estimate();
  CostTable table = load_cost_table(path);
  if (!table.has_kind(shape.training, causal)) return estimate();
  return table.memory_measured ? table : with_memory_from(table, estimate());
}

// One block's frozen weights as the weight plan counts them (the blocks alike: their mean), in the compute dtype and
// stored as FP8 (stored_as_fp8: codes and scales, the rest as is). Shapes only: a base without storage (meta) will do.
BlockWeights block_weights(Denoiser& model, bool streamable) {
  std::map<const c10::TensorImpl*, std::string> names;
  for (const auto& kv : model.named_parameters()) names[kv.value().unsafeGetTensorImpl()] = kv.key();
  const auto targets = model.lora_targets();
  const auto blocks = model.block_modules();
  BlockWeights w;
  w.blocks = static_cast<int64_t>(blocks.size()), w.streamable = streamable;
  int64_t bytes = 0, fp8 = 0;
  for (auto* b : blocks)
    for (const auto& p : b->parameters()) {
      if (p.requires_grad()) continue;
      const int64_t e = p.numel() * static_cast<int64_t>(p.element_size());
      bytes += e;
      fp8 += stored_as_fp8(names[p.unsafeGetTensorImpl()], p, targets) ? p.numel() + p.size(0) * 4 : e;
    }
  if (w.blocks > 0) w.bytes = bytes / w.blocks, w.fp8_bytes = fp8 / w.blocks;
  return w;
}

}  // namespace

DeviceMemoryInfo device_memory_info(const torch::Device& device) {
  if (!device.is_cuda()) return {"cpu", 0};
#ifdef VDT_PLAN_DEVICE_PROPERTIES
  const auto* p = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
  return {p->name, static_cast<int64_t>(p->totalGlobalMem)};
#else
  return {"cuda", 0};
#endif
}

PlannedMemory plan_memory(Denoiser& model, const torch::Device& device, const RunShape& shape,
                          const MemoryFlags& flags) {
  const DeviceMemoryInfo dev = device_memory_info(device);
  if (flags.memory == "auto" && dev.total_bytes <= 0) return {flags.knobs, std::nullopt};  // the CPU: no budget

  PlanRequest req;
  req.budget_bytes = parse_memory_budget(flags.memory, dev.total_bytes, "--memory");
  const double reserve = static_cast<double>(dev.total_bytes - req.budget_bytes);
  req.budget_note = flags.memory == "auto" ? "auto: " + gib_text(static_cast<double>(dev.total_bytes)) + " GiB on " +
                                                 dev.name + " less " + gib_text(reserve) + " GiB"
                                           : "--memory " + flags.memory;
  std::string clamped;  // a budget above what the device offers: auto's, said in the start-up table's budget line
  req.budget_bytes = clamp_budget(req.budget_bytes, dev.total_bytes, dev.name, &clamped);
  if (!clamped.empty()) req.budget_note = clamped;
  FixedMemoryInputs in = parameter_counts(model);
  in.fp32_masters = shape.fp32_masters, in.moment_bytes = shape.moment_bytes, in.world = shape.world;
  in.zero2 = shape.zero2, in.shard_ranks = shape.shard_ranks, in.grad_accum = shape.grad_accum;
  req.fixed = fixed_memory(in);
  const ModelDims dims = model_dims(model, shape.text_len);
  req.blocks = in.blocks;
  req.rows = shape.video_rows + (dims.text_len > 0 ? 0 : shape.text_len);  // no cross-attention: text in the rows
  req.text_rows = dims.text_len > 0 ? shape.text_rows : 0;
  req.training = shape.training;
  req.causal = shape.chunks > 0;
  req.allow_none = flags.allow_none;
  req.allow_offload = flags.allow_offload;
  req.world = shape.world;
  req.given = flags.given;
  req.knobs = flags.knobs;

  const std::string card = device.is_cuda() ? card_slug(dev.name) : "cpu";
  // Nothing fits: the planner's error, naming what would. A LoRA's base held whole by each rank: the weight candidates
  // too (streaming, the FP8 base). A base sharded over the ranks gathers its blocks: its streamed shards
  // (--stream-blocks) are the user's, not planned.
  const CostTable costs = costs_for(model, card, shape, dims, req.rows);
  Plan plan = flags.allow_weights && shape.shard_ranks == 1
                  ? make_weight_plan(req, block_weights(model, shape.training == "lora"), costs, nullptr)
                  : make_plan(req, costs);
  plan.knobs.check();  // the plan's choices pass the flags' own checks
  return {plan.knobs, plan};
}

nlohmann::ordered_json plan_json(const Plan& plan) {
  return {{"budget_gib", static_cast<double>(plan.budget_bytes) / kBytesPerGiB},
          {"budget", plan.budget_note},
          {"flags", plan.flags()},
          {"predicted_peak_gib", static_cast<double>(plan.peak_bytes) / kBytesPerGiB},
          {"predicted_step_s", plan.step_seconds},
          {"host_gib", static_cast<double>(plan.host_bytes) / kBytesPerGiB},
          {"costs", plan.costs},
          {"table", plan.table_lines()}};
}

}  // namespace vdt
