// The knobs that several commands take, each declared once in a section (docs/architecture.md, "Knobs"): a plain
// struct with in-class defaults, its fields() (flag, help; train/loop/config_fields.h) and the checks of its values.
// A trainer's config holds the sections it takes as members and lifts their fields into its own fields() where its
// JSON keys go (args.json and config.json keep their key order); `vdt bench step` binds the same lists and hands the
// sections to the trainer whole. Where the trainers differ, the section takes the difference as a parameter (the
// precision modes a trainer offers, whether --checkpointing none is one), so it stays stated and checked.
// Not here: the knobs of one trainer only, or the ones both have under different spellings or defaults (--data_root /
// --data-root, --lr): those stay in the trainer's config (docs/cli.md "Flags, once").
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "train/loop/config_fields.h"
#include "train/plan/memory_knobs.h"

namespace vdt {

// One precision a command offers and what it means there (SFT's bf16 trains bf16 weights; the causal trainer's is a
// frozen bf16 base under an fp32 LoRA): its --help and its errors list these.
struct PrecisionChoice {
  Precision mode;
  std::string meaning;  // empty: the name says it
};

// The flags several commands take with one meaning, each declared once here (flag and help) and bound to a member of
// its holder, a section below or a command's own config; the member's initialiser is that command's default.
// --device: auto (a GPU when one is visible, else the CPU), cpu, cuda or cuda:N (core/device_flag.h).
std::string device_help();
// --seed: the seed every random draw of the command comes from.
std::string seed_help();
// --model: the base model, by preset; `presets`: those the holder takes; `note`: what the holder does with it or
// what its default means.
std::string model_help(const std::vector<std::string>& presets, const std::string& note = "");
// --precision: the modes the holder offers, with their meanings there.
std::string precision_help(const std::vector<PrecisionChoice>& precisions);

template <class C>
ConfigField<C> device_field(std::string C::*member) {
  return {"--device", device_help(), member};
}
template <class C>
ConfigField<C> seed_field(uint64_t C::*member) {
  return {"--seed", seed_help(), member};
}
template <class C>
ConfigField<C> model_field(std::string C::*member, const std::vector<std::string>& presets,
                           const std::string& note = "") {
  return {"--model", model_help(presets, note), member};
}
template <class C>
ConfigField<C> precision_field(std::string C::*member, const std::vector<PrecisionChoice>& precisions) {
  return {"--precision", precision_help(precisions), member};
}

// Precision and kernels: where a step runs, in which number format, through which kernels.
struct ComputeSection {
  std::string device = "auto";  // auto | cpu | cuda | cuda:N (core/device_flag.h)
  std::string precision;        // no shared default: each holder names its own (SFT mixed; causal, bench step bf16)
  std::string fused_kernels = "on";  // on | off: the fused elementwise ops or their reference (model/kernels)
  std::string fp8 = "off";           // off | on | fast | emulate: FP8 block linears (distributed/fp8_blocks.h)

  // `precisions`: the modes the holder offers; another value is an error listing them.
  Precision precision_mode(const std::vector<PrecisionChoice>& precisions) const;
  Fp8Mode fp8_mode() const;
  bool fused() const;                                                   // validated: on or off
  void validate(const std::vector<PrecisionChoice>& precisions) const;  // spelling only: no device is touched
  static std::vector<ConfigField<ComputeSection>> fields(const std::vector<PrecisionChoice>& precisions);
};

// Memory: what a checkpointed step keeps for backward (distributed/activation_checkpoint.h), and the budget per GPU
// the memory plan picks the memory flags left out for (docs/planner.md; train/plan/startup_plan.h).
struct MemorySection {
  std::string checkpointing = "block";  // block | selective | none (where the holder offers it)
  int64_t selective_blocks = -1;        // with selective: the first N blocks keep GEMM/attention outputs (-1: all)
  std::string memory = "auto";          // --memory: auto (the device's memory less a margin; no plan on the CPU) | GiB
  // Not a flag: the flags this command line gave (cli/commands.h given_flags), whose values the plan keeps. A config
  // built in code leaves it empty: there a value that differs from its default counts as given (flag_given).
  std::set<std::string> given;

  bool flag_given(const std::string& flag, bool differs_from_default) const {
    return differs_from_default || given.count(flag) > 0;
  }
  // `modes`: the checkpointing modes the holder offers (the causal trainer always checkpoints: no none).
  Checkpointing checkpointing_mode(const std::vector<Checkpointing>& modes) const;
  void check_memory() const;  // --memory's spelling (auto or a positive number of GiB): no device is touched
  static std::vector<ConfigField<MemorySection>> fields(const std::vector<Checkpointing>& modes);
};

// Attention: the block-causal attention kernel (model/block_causal.h).
struct AttentionSection {
  std::string attn = "prefix";  // prefix | mask (the Python trainer's fa3 | flex)

  CausalKernel kernel() const;  // validated
  static const std::vector<ConfigField<AttentionSection>>& fields();
};

// Memory, the causal trainer's further knobs: a checkpointed block's kept tensors in pinned host memory, the share
// of its prefix attention that a block recomputing whole keeps instead of running again, and where the frozen base's
// block weights live (streamed from pinned host memory, stored as FP8: distributed/weight_stream.h). The SFT trainer
// has none of them (its runner offloads nothing; its attention is bidirectional, not the chunked prefix attention;
// every weight trains).
struct CausalMemorySection {
  std::string act_offload = "off";     // on | off
  double attn_keep = 0;                // share of the prefix attention's query rows kept for the recompute
  std::string stream_blocks = "auto";  // auto (the plan's; 0 without one) | N
  int64_t stream_prefetch = 0;         // 0: the plan's (1 without one)
  std::string base_dtype = "bf16";     // bf16 | fp8 | auto

  bool act_offload_on() const;                         // validated: on or off
  std::optional<int64_t> stream_blocks_count() const;  // validated; empty: auto
  // --act-offload's, --stream-blocks', --stream-prefetch's and --base-dtype's spelling, and --attn-keep against the
  // attention kernel and the checkpointing it refines (`mode`: the resolved checkpointing; check_attention_keep).
  void validate(const AttentionSection& attention, const MemorySection& memory, Checkpointing mode) const;
  static const std::vector<ConfigField<CausalMemorySection>>& fields();
};

// Randomness: the seed that keys every random stream of a run (data order, draws, noise; core/rng_purposes.h).
struct RandomSection {
  uint64_t seed = 0;
  static const std::vector<ConfigField<RandomSection>>& fields();
};

// The sections' knobs parsed once into typed values (train/plan/memory_knobs.h), with the ones the command line fixed:
// what a trainer hands the memory plan (train/plan/startup_plan.h). `precisions` and `modes`: what the holder offers;
// `causal_memory` and `attention`: null for a holder without them. Throws naming the flag of a bad value.
MemoryFlags memory_flags(const ComputeSection& compute, const std::vector<PrecisionChoice>& precisions,
                         const MemorySection& memory, const std::vector<Checkpointing>& modes,
                         const CausalMemorySection* causal_memory = nullptr,
                         const AttentionSection* attention = nullptr);
// The run's knobs written back into its sections' flags, once, for the config the run records (config.json, args.json:
// what ran); nothing parses them again. The sections a holder lacks are null.
void record_knobs(const MemoryKnobs& knobs, ComputeSection& compute, MemorySection& memory,
                  CausalMemorySection* causal_memory = nullptr, AttentionSection* attention = nullptr);

}  // namespace vdt
