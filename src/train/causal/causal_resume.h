// The causal run's start: the LoRA's shape and where the run continues from (docs/causal.md "Resume"): exactly from a
// state slot (the float32 factors, the AdamW moments, the sample position), from the newest lora_step file with fresh
// moments, from --init-lora or a --resume LoRA file, or fresh. Not here: what a save writes
// (train/checkpoint/lora_checkpoint).
#pragma once
#include <cstdint>
#include <string>

#include "core/safetensors.h"
#include "distributed/grad_sync.h"
#include "model/denoiser.h"
#include "train/causal/causal_config.h"

namespace vdt {

// Said on its own start-up line and in args.json: the Python trainer continues the released CWM LoRA when
// --init-lora is not given; vdt ships no release, so without --init-lora it starts a new one.
constexpr const char* kFreshLora = "fresh: a new LoRA (B = 0), no --init-lora";
constexpr const char* kFreshLoraChosen = "fresh: a new LoRA (B = 0), --init-lora none";

// Whether this run continues one (--resume given, or --out holds a lora_step file or a sealed state slot): then the
// LoRA comes from there, not from --init-lora.
bool continues_a_run(const CausalConfig& cfg);
// A MiniMax-H3 base (`family` "h3") starting a run without --init-lora is an error asking for the choice: a LoRA
// file, or `none` for a new one (the Python trainer continues the released CWM LoRA there; a silent fresh LoRA would
// train for hours unnoticed). Wan bases keep the fresh default. Checked before the weights load.
void check_lora_choice(const CausalConfig& cfg, const std::string& family);

// The LoRA this run starts from decides its rank and alpha (the rule resume_causal follows: the newest lora_step in
// --out, else --resume X.safetensors, else another run's state, else --init-lora); a --lora-rank / --lora-alpha that
// disagrees is an error naming both values. Without a starting LoRA: the flags, else rank 32, alpha 32. The resolved
// values go into every file the run writes, so a re-run after preemption applies what the uninterrupted run applied.
void resolve_lora_shape(CausalConfig& cfg);

// The run being built, as its resume sees it.
struct CausalResumeRun {
  const CausalConfig& cfg;
  int64_t total_steps;
  Denoiser& model;           // the base with the LoRA attached
  const NamedTensors& lora;  // the float32 factors, by checkpoint name
  GradSync& sync;            // the update path: takes the AdamW moments
  int rank, world;
};

struct CausalResume {
  int64_t start_step = 0, samples_base = 0;  // samples_base: the global sample index at start_step
  std::string state_slot;                    // the slot resumed from (a save must not overwrite it)
  std::string how;                           // for the start-up table and the summary
  std::string lora_start;                    // fresh (kFreshLora), the --init-lora file, or continued
};

// --resume auto: continue exactly from the newest sealed state slot in --out (its LoRA file is written after it, so a
// kill between the two leaves the slot, and the missing LoRA file is written again from it); LoRA files newer than that
// slot (a run of an older vdt killed between its LoRA file and its slot) are trained again. Without any slot, the
// Python trainer's rule: continue from the newest lora_step file with fresh moments. Every sealed slot corrupt is an
// error unless --ignore-corrupt-state. --resume X.safetensors: start from that LoRA. --resume DIR: continue exactly
// from another run's state.
CausalResume resume_causal(const CausalResumeRun& in);

}  // namespace vdt
