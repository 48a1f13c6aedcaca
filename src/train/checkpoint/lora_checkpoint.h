// The causal trainer's files in --out (docs/design.md §5): `lora_stepNNNNN.safetensors` — the LoRA factors in bf16 with
// their metadata (one struct, written and read by generate/lora_file.h), what the Python trainer writes and its Python
// code loads — and, beyond the Python trainer,
// its parts of a checkpoint (train/checkpoint/checkpointer.h, the same slots as the SFT trainer's) with the float32
// factors, the AdamW moments and the sample position, so a re-run continues exactly. The Python trainer resumes from
// the newest lora_step file with fresh moments; we do too when no slot matches that step.
#pragma once
#include <torch/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "distributed/grad_sync.h"
#include "model/denoiser.h"
#include "train/checkpoint/checkpointer.h"

namespace vdt {

std::string lora_step_path(const std::string& out, int64_t step);  // <out>/lora_step00010.safetensors
// The newest `lora_step<digits>.safetensors` in `out`: (step, path); (0, "") when there is none (other names, such
// as a save's temp file, are ignored). A step number that does not fit 64 bits is an error naming the file.
std::pair<int64_t, std::string> newest_lora_step(const std::string& out);

// The state after `step`: its position in the global sample stream and the world size that produced it.
struct CausalPosition {
  int64_t step = 0, samples_seen = 0, world = 1;
  std::string model_config;  // the base's architecture (Denoiser::config_json), checked on an exact resume
};

// The exact-resume state of a step through the checkpointer (train/checkpoint/checkpointer.h): the float32 factors
// and AdamW moments (the update path's state, replicated: one shard), the position as trainer_state.json, the flags
// as config.json. Never over `keep`; every rank calls it. Returns the slot directory.
// `out`: the run directory (--out), `config_json`: the run's flags (CausalConfig::to_json).
std::string save_causal_state(const std::string& out, const std::string& config_json, const std::string& keep,
                              const CausalPosition& pos, const SyncState& update, Communicator& comm);

struct CausalState {
  CausalPosition pos;
  std::string dir;
  LoadedCheckpoint checkpoint;
  // The slot as the update path loads it (LoadedCheckpoint::full).
  torch::Tensor full(const std::string& kind, const std::string& name) const;
  int64_t optimizer_steps() const;  // AdamW's step count (the fused kernel's per-factor count)
};
// The newest complete slot behind `out` (a run directory, a slot or the `state` link) whose step is `step` (any
// step when < 0); nullopt (with a line in `notes` saying why) otherwise. Sealed slots that are all corrupt are a
// CorruptStateError unless allow_corrupt.
std::optional<CausalState> find_causal_state(const std::string& out, int64_t step, std::vector<std::string>* notes,
                                             bool allow_corrupt = false);

}  // namespace vdt
