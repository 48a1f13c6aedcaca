// The shared sections' flags, help and checks (config_sections.h).
#include "train/loop/config_sections.h"

#include <algorithm>
#include <utility>

#include "core/device_flag.h"
#include "core/error.h"
#include "train/plan/memory_plan.h"  // parse_memory_budget

namespace vdt {
namespace {

// "a (its meaning), b or c": the values a choice flag takes, as its --help and its errors list them.
std::string one_of(const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += i == 0 ? "" : i + 1 == values.size() ? " or " : ", ";
    out += values[i].first + (values[i].second.empty() ? "" : " (" + values[i].second + ")");
  }
  return out;
}

std::string one_of(const std::vector<PrecisionChoice>& precisions) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const auto& p : precisions) values.emplace_back(precision_name(p.mode), p.meaning);
  return one_of(values);
}

std::string one_of(const std::vector<Checkpointing>& modes) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const auto m : modes)
    values.push_back(m == Checkpointing::block ? std::pair{"block", "keep each block's inputs, recompute the block"}
                     : m == Checkpointing::selective
                         ? std::pair{"selective",
                                     "also keep its GEMM and attention outputs, recompute only the "
                                     "elementwise work: norms, modulation, RoPE, gates, GELU"}
                         : std::pair{"none", "keep every activation"});
  return one_of(values);
}

}  // namespace

std::string device_help() {
  return "auto (a GPU when one is visible, else the CPU), cpu, cuda (under torchrun: GPU LOCAL_RANK) or cuda:N";
}

std::string seed_help() { return "seed of every random stream (an integer >= 0)"; }

std::string model_help(const std::vector<std::string>& presets, const std::string& note) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const auto& p : presets) values.emplace_back(p, "");
  return "base model preset: " + one_of(values) + (note.empty() ? "" : "; " + note);
}

std::string precision_help(const std::vector<PrecisionChoice>& precisions) { return one_of(precisions); }

Precision ComputeSection::precision_mode(const std::vector<PrecisionChoice>& precisions) const {
  for (const auto& p : precisions)
    if (precision_name(p.mode) == precision) return p.mode;
  VDT_FAIL("--precision: expected ", one_of(precisions), ", got '", precision, "'");
}

Fp8Mode ComputeSection::fp8_mode() const { return parse_fp8(fp8, "--fp8"); }

bool ComputeSection::fused() const {
  VDT_CHECK(fused_kernels == "on" || fused_kernels == "off", "--fused-kernels: expected on or off, got '",
            fused_kernels, "'");
  return fused_kernels == "on";
}

void ComputeSection::validate(const std::vector<PrecisionChoice>& precisions) const {
  parse_device_flag(device, "--device");
  precision_mode(precisions);
  fused();
  fp8_mode();
}

std::vector<ConfigField<ComputeSection>> ComputeSection::fields(const std::vector<PrecisionChoice>& precisions) {
  using C = ComputeSection;
  return {
      device_field(&C::device),
      precision_field(&C::precision, precisions),
      {"--fused-kernels",
       "on: the blocks' elementwise chains (LayerNorm + modulate, gate + residual) run as fused ops "
       "with a hand-written backward (CUDA kernels on GPUs, their ATen fallback elsewhere; "
       "docs/architecture.md \"Fused kernels\"); off: the reference ops",
       &C::fused_kernels},
      {"--fp8",
       "FP8 block linears (docs/architecture.md \"FP8 linears\"): the q/k/v/o and FFN GEMMs of every block "
       "but the first and last as row-wise scaled E4M3 GEMMs, forward and backward: off, on (a CUDA GPU of "
       "compute capability 8.9+), fast (on, with fast accumulation in every FP8 GEMM: faster, less exact) or "
       "emulate (on's numerics in fp32 ops on any device: checks, tests)",
       &C::fp8},
  };
}

Checkpointing MemorySection::checkpointing_mode(const std::vector<Checkpointing>& modes) const {
  return parse_checkpointing(checkpointing, "--checkpointing", modes);
}

void MemorySection::check_memory() const {
  parse_memory_budget(memory, /*device_total_bytes=*/int64_t{1} << 50, "--memory");  // any device: the spelling only
}

std::vector<ConfigField<MemorySection>> MemorySection::fields(const std::vector<Checkpointing>& modes) {
  using C = MemorySection;
  return {
      {"--checkpointing",
       "what each block keeps for backward: " + one_of(modes) +
           ". Left out on a GPU, the memory plan (--memory) picks it and the other memory flags left out; the "
           "default shown is what runs without a budget (the CPU)",
       &C::checkpointing},
      {kSelectiveBlocksFlag,
       "with --checkpointing selective: only the first N blocks keep their GEMM and attention "
       "outputs, the rest recompute whole (-1: all; what fits in memory); another value without "
       "selective is an error",
       &C::selective_blocks},
      {"--memory",
       "memory budget per GPU for the memory plan (docs/planner.md): auto (the device's memory less "
       "max(2 GiB, 3 %); on the CPU no plan: the memory flags as given or their defaults) or GiB (e.g. "
       "80); the plan picks the fastest --checkpointing, --selective-blocks (and the causal trainer's "
       "--act-offload, --attn-keep, --attn) whose predicted peak and margin fit, keeping those given",
       &C::memory},
  };
}

CausalKernel AttentionSection::kernel() const {
  VDT_CHECK(attn == "prefix" || attn == "mask" || attn == "fa3" || attn == "flex",
            "--attn: expected prefix (one SDPA "
            "call per chunk; the Python trainer's fa3) or mask (one masked call; its flex), got '",
            attn, "'");
  return causal_kernel_from_string(attn);
}

const std::vector<ConfigField<AttentionSection>>& AttentionSection::fields() {
  using C = AttentionSection;
  static const std::vector<ConfigField<C>> f = {
      {"--attn",
       "block-causal attention: prefix (one SDPA call per chunk over its key prefix) or mask (one call with "
       "a block mask); the Python trainer's fa3 / flex mean the same two",
       &C::attn},
  };
  return f;
}

bool CausalMemorySection::act_offload_on() const {
  VDT_CHECK(act_offload == "on" || act_offload == "off", "--act-offload: expected on or off, got '", act_offload, "'");
  return act_offload == "on";
}

void CausalMemorySection::validate(const AttentionSection& attention, const MemorySection& memory,
                                   Checkpointing mode) const {
  act_offload_on();
  stream_blocks_count();
  parse_base_dtype(base_dtype);
  VDT_CHECK(stream_prefetch >= 0, "--stream-prefetch ", stream_prefetch, ": expected >= 1 (0: the plan's)");
  check_attention_keep(attn_keep, attention.kernel() == CausalKernel::prefix, mode, memory.selective_blocks);
}

const std::vector<ConfigField<CausalMemorySection>>& CausalMemorySection::fields() {
  using C = CausalMemorySection;
  static const std::vector<ConfigField<C>> f = {
      {"--act-offload",
       "on: checkpointed block inputs (and --attn-keep's kept attention outputs) in pinned host "
       "memory, copied on a side stream; off",
       &C::act_offload},
      {kAttnKeepFlag,
       "share of each block's prefix-attention query rows (the chunks with the most keys first) whose "
       "output and log-sum-exp the forward keeps, so a block's recompute skips their attention forward; "
       "costs that share x tokens x width x 2 bytes per block until its backward, on the host with "
       "--act-offload on (0: recompute all; needs --attn prefix)",
       &C::attn_keep},
      {"--stream-blocks",
       "frozen blocks whose weights live in pinned host memory and are copied to the GPU on a side stream ahead of "
       "use (forward, recompute, backward), the LoRA staying on the GPU: auto (the memory plan's; 0 without one) or a "
       "count (docs/planner.md)",
       &C::stream_blocks},
      {"--stream-prefetch", "streamed blocks copied ahead of use (0: the memory plan's; 1 without one)",
       &C::stream_prefetch},
      {kBaseDtypeFlag,
       "storage of the frozen block linears: bf16, fp8 (E4M3 with a scale per output channel, dequantized for each "
       "use: half their memory) or auto (FP8 only when no bf16 plan fits --memory, said so at start-up)",
       &C::base_dtype},
  };
  return f;
}

std::optional<int64_t> CausalMemorySection::stream_blocks_count() const {
  if (stream_blocks == "auto") return std::nullopt;
  int64_t n = -1;
  size_t used = 0;
  try {
    n = std::stoll(stream_blocks, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  VDT_CHECK(used == stream_blocks.size() && used > 0 && n >= 0, "--stream-blocks '", stream_blocks,
            "': expected auto or a count of blocks >= 0");
  return n;
}

const std::vector<ConfigField<RandomSection>>& RandomSection::fields() {
  using C = RandomSection;
  static const std::vector<ConfigField<C>> f = {
      seed_field(&C::seed),
  };
  return f;
}

MemoryFlags memory_flags(const ComputeSection& compute, const std::vector<PrecisionChoice>& precisions,
                         const MemorySection& memory, const std::vector<Checkpointing>& modes,
                         const CausalMemorySection* causal_memory, const AttentionSection* attention) {
  MemoryFlags f;
  MemoryKnobs& k = f.knobs;
  k.precision = compute.precision_mode(precisions);
  k.fp8 = compute.fp8_mode();
  k.checkpointing = memory.checkpointing_mode(modes);
  k.selective_blocks = memory.selective_blocks;
  f.memory = memory.memory;
  f.memory_given = memory.flag_given("--memory", memory.memory != "auto");
  f.allow_none = std::find(modes.begin(), modes.end(), Checkpointing::none) != modes.end();
  f.allow_offload = causal_memory != nullptr;
  f.allow_weights = causal_memory != nullptr;
  // The choices the user fixed: given on the command line, or (a config built in code) set to another value than
  // the default.
  const MemorySection mem0;
  auto& g = f.given;
  if (memory.flag_given("--checkpointing", memory.checkpointing != mem0.checkpointing))
    g.checkpointing = k.checkpointing;
  if (memory.flag_given(kSelectiveBlocksFlag, memory.selective_blocks != mem0.selective_blocks))
    g.selective_blocks = k.selective_blocks;
  if (causal_memory) {
    const CausalMemorySection cm0;
    k.act_offload = causal_memory->act_offload_on();
    k.attn_keep = causal_memory->attn_keep;
    if (memory.flag_given("--act-offload", causal_memory->act_offload != cm0.act_offload))
      g.act_offload = k.act_offload;
    if (memory.flag_given(kAttnKeepFlag, causal_memory->attn_keep != cm0.attn_keep)) g.attn_keep = k.attn_keep;
    // --stream-blocks auto and --stream-prefetch 0 leave them to the plan; --base-dtype's bf16 and fp8 are fixed, its
    // auto lets the plan store the base as FP8 when no bf16 plan fits
    g.stream_blocks = causal_memory->stream_blocks_count();
    k.stream_blocks = g.stream_blocks.value_or(0);
    if (causal_memory->stream_prefetch > 0) g.stream_prefetch = causal_memory->stream_prefetch;
    k.stream_prefetch = g.stream_prefetch.value_or(1);
    g.base_dtype = parse_base_dtype(causal_memory->base_dtype);
    k.fp8_base = g.base_dtype == BaseDtype::fp8;
  }
  if (attention) {
    k.attn = attention->kernel();
    if (memory.flag_given("--attn", attention->attn != AttentionSection{}.attn)) g.attn = k.attn;
  }
  return f;
}

void record_knobs(const MemoryKnobs& knobs, ComputeSection& compute, MemorySection& memory,
                  CausalMemorySection* causal_memory, AttentionSection* attention) {
  compute.precision = precision_name(knobs.precision);
  memory.checkpointing = checkpointing_name(knobs.checkpointing);
  memory.selective_blocks = knobs.selective_blocks;
  if (causal_memory) {
    causal_memory->act_offload = knobs.act_offload ? "on" : "off";
    causal_memory->attn_keep = knobs.attn_keep;
    causal_memory->stream_blocks = std::to_string(knobs.stream_blocks);
    causal_memory->stream_prefetch = knobs.stream_prefetch;
    causal_memory->base_dtype = knobs.fp8_base ? "fp8" : "bf16";
  }
  if (attention) attention->attn = causal_kernel_name(knobs.attn);
}

}  // namespace vdt
