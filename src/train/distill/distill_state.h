// The distillation run's files (docs/distill.md "Files"): the student LoRA and its EMA in the causal LoRA format
// (`lora_stepNNNNN.safetensors`, `lora_stepNNNNN_ema.safetensors`; metadata saying a few-step student and its step
// list), and the exact-resume state through the checkpointer both other trainers use (train/checkpoint/checkpointer.h):
// both LoRAs, both AdamW states, the EMA and the update counts in one slot. Every draw of a step is keyed by (seed,
// step, rank), so the step counter is the generators' whole state. A save is one unit: the slot first, then the LoRA
// files (a kill between them leaves a slot whose files the re-run writes from it).
// Not here: what a step computes (distill_step.h).
#pragma once
#include <cstdint>
#include <string>

#include "train/distill/distill_run.h"

namespace vdt {

// <out>/lora_stepNNNNN.safetensors, or its EMA beside it (<out>/lora_stepNNNNN_ema.safetensors).
std::string distill_lora_path(const std::string& out, int64_t step, bool ema);

// The student's rank and alpha: --init-lora's (a --lora-rank / --lora-alpha that disagrees is an error naming both),
// else the flags, else 32 / the rank; the critic's: its flags, else the student's rank / its own rank.
void resolve_lora_shapes(DistillConfig& cfg);

// Where the run continues from (--resume auto: the newest sealed slot in --out; a directory or slot of another run),
// or --init-lora, or a fresh student (said loudly). Fills r.start_step, student/critic update counts, the EMA,
// r.resume_how, r.lora_start, r.state_slot; writes a LoRA file a cut save left missing.
void resume_distill(DistillRun& r);

// The save at `step`: the slot, then (rank 0) the student LoRA and its EMA. Returns the student LoRA's path.
std::string save_distill(DistillRun& r, int64_t step);

}  // namespace vdt
