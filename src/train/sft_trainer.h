// `vdt train sft` (SPEC §4, seed gc25d): full-parameter SFT of a Wan DiT with the zero-initialised gc_sem_cond
// adapter and per-cell text, flow matching with first-frame conditioning, AdamW with the adapter group at --cond_lr,
// warmup, gradient accumulation, clipping, validation with cond/uncond/nulltext, bf16 exports, CSV/TensorBoard logs.
// One process (CPU or one GPU); distribution and state slots plug in through dist/ and checkpoint code later.
#pragma once
#include <string>

#include "train/sft_config.h"

namespace vdt {

struct SftSummary {
  int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double s_per_step = 0, data_s_per_step = 0, peak_mem_gb = 0;
  std::string last_export;
};

SftSummary train_sft(const SftConfig& cfg);

}  // namespace vdt
