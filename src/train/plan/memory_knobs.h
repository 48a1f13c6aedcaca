// The knobs a run's memory depends on, as typed values: the number format, FP8, how the blocks checkpoint and which of
// them keep, the offload, the attention kernel and its kept share, where a frozen base's block weights live (streamed
// from host memory, stored as FP8) (docs/planner.md). The trainer's config parses its
// flags into them once (train/loop/config_sections.h), the memory plan fills those the command line left out
// (train/plan/startup_plan.h), and the trainer applies the result. A knob the plan learns to choose joins here.
// Not here: the flags and their spellings (config_sections.h), the search (memory_plan.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "distributed/activation_checkpoint.h"
#include "distributed/fp8_base.h"
#include "distributed/fp8_blocks.h"
#include "model/block_causal.h"

namespace vdt {

// --precision: mixed (bf16 compute, fp32 master weights and moments; SFT only), bf16, fp32.
enum class Precision { mixed, bf16, fp32 };
const char* precision_name(Precision p);  // the flag's spelling

struct MemoryKnobs {
  Precision precision = Precision::bf16;  // the trainers' configs set their own default (SFT mixed)
  Fp8Mode fp8 = Fp8Mode::off;
  Checkpointing checkpointing = Checkpointing::block;
  int64_t selective_blocks = -1;  // with selective: the first N blocks keep their GEMM and attention outputs (-1: all)
  bool act_offload = false;       // kept block inputs in pinned host memory (the causal trainer)
  double attn_keep = 0;           // share of the prefix attention's query rows kept for the recompute (causal)
  CausalKernel attn = CausalKernel::prefix;  // block-causal attention (the causal trainer)
  // A LoRA's frozen base (the causal trainer; distributed/weight_stream.h, docs/planner.md "Streaming and the FP8
  // base"): blocks whose frozen weights live in pinned host memory, how many of them are copied ahead of use, and the
  // frozen block linears stored as FP8.
  int64_t stream_blocks = 0;
  int64_t stream_prefetch = 1;
  bool fp8_base = false;

  // What enable_block_checkpointing takes (with checkpointing none: nothing to install).
  CheckpointOptions checkpoint_options() const;
  // The combination's checks (check_selective_blocks, check_attention_keep); throws naming the flag.
  void check() const;
  // "--checkpointing selective --selective-blocks 8 --act-offload on ..." (`causal`: the block-causal knobs too, and
  // the weight knobs when they are not the defaults).
  std::string flags(bool causal) const;
};

// The knobs a user fixed by flag; empty: the plan decides.
struct PlanChoices {
  std::optional<Checkpointing> checkpointing;
  std::optional<int64_t> selective_blocks;  // -1: all
  std::optional<bool> act_offload;
  std::optional<double> attn_keep;
  std::optional<CausalKernel> attn;
  std::optional<int64_t> stream_blocks;    // --stream-blocks N
  std::optional<int64_t> stream_prefetch;  // --stream-prefetch D
  BaseDtype base_dtype = BaseDtype::bf16;  // --base-dtype: bf16 and fp8 fixed; auto: FP8 only when bf16 cannot fit
};

// What a trainer's flags say of the knobs, parsed once (its config's memory_flags()): the values to run with when
// nothing is planned, which of them the command line fixed, the budget, and what the trainer offers.
struct MemoryFlags {
  MemoryKnobs knobs;            // as given, or their defaults
  PlanChoices given;            // fixed by the command line (or, in a config built in code, set to a non-default)
  std::string memory = "auto";  // --memory: auto | GiB
  bool memory_given = false;
  bool precision_given = false;  // --precision on the command line (SFT chooses it on one process otherwise)
  bool allow_none = true;        // the trainer can run without checkpointing (the causal trainer cannot)
  bool allow_offload = false;    // the trainer has --act-offload
  bool allow_weights = false;    // the trainer has --stream-blocks, --stream-prefetch and --base-dtype (a LoRA's base)
};

}  // namespace vdt
