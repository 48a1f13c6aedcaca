// The causal trainer's files in --out (SPEC §5): `lora_stepNNNNN.safetensors` — the LoRA factors in bf16 with
// metadata base, step, objective, span_chunks, level_shift (plus rank and alpha, so `vdt ckpt merge-lora` and
// read_lora take it alone), what the seed writes and its Python code loads — and, beyond the seed, a crash-safe
// state slot (core/state_slots.h: state_A / state_B) with the float32 factors, the AdamW moments and the sample
// position, so a re-run continues exactly. The seed resumes from the newest lora_step file with fresh moments; we do
// too when no slot matches that step.
#pragma once
#include <torch/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "distributed/grad_sync.h"
#include "train/causal/causal_config.h"

namespace vdt {

std::string lora_step_path(const std::string& out, int64_t step);  // <out>/lora_step00010.safetensors
// The newest `lora_step<digits>.safetensors` in `out`: (step, path); (0, "") when there is none (other names, such
// as a save's temp file, are ignored).
std::pair<int64_t, std::string> newest_lora_step(const std::string& out);

// The state after `step`: its position in the global sample stream and the world size that produced it.
struct CausalPosition {
  int64_t step = 0, samples_seen = 0, world = 1;
  std::string model_config;  // the base's architecture (Denoiser::config_json), checked on an exact resume
};

// Writes the slot (never over `keep`); returns the slot directory. `lora` in float32 as trained, `optimizer` as
// AdamW::state() names it. Only rank 0 calls this (the LoRA and its moments are replicated).
std::string save_causal_state(const std::string& out, const std::string& keep, const CausalPosition& pos,
                              const NamedTensors& lora, const NamedTensors& optimizer, const std::string& config_json);

// One save of the causal trainer (rank 0): the LoRA file `path` in bf16 with the seed's metadata, then the state slot
// (never over `keep`) with the float32 factors and the update path's optimizer state. Returns the slot directory.
std::string save_lora_step(const CausalConfig& cfg, const std::string& path, const std::string& keep,
                           const CausalPosition& pos, const NamedTensors& lora, const SyncState& update);

struct CausalState {
  CausalPosition pos;
  std::string dir;
  std::shared_ptr<SafetensorsFile> tensors;  // "lora.<name>", "optim.<key>"
  // The slot as the update path loads it: weight -> "lora.<name>", exp_avg / exp_avg_sq -> "optim.<kind>.<name>".
  torch::Tensor full(const std::string& kind, const std::string& name) const;
  int64_t optimizer_steps() const;  // AdamW's step count (the fused kernel's per-factor count)
};
// The newest complete slot in `out` whose step is `step`; nullopt (with a line in `notes` saying why) otherwise.
std::optional<CausalState> find_causal_state(const std::string& out, int64_t step, std::vector<std::string>* notes);

}  // namespace vdt
