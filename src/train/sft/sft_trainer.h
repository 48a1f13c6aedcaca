// `vdt train sft` (docs/design.md §4, the Python trainer gc25d): full-parameter SFT of a Wan DiT with the
// zero-initialised gc_sem_cond adapter and per-cell text, flow matching with first-frame conditioning, AdamW with the
// adapter group at
// --cond_lr, warmup, gradient accumulation, clipping, validation with cond/uncond/nulltext, bf16 exports,
// CSV/TensorBoard logs. State slots and exact resume: train/train_state.h, docs/resume.md. Several ranks: ZeRO-2
// (train/zero2.h) over a dist/ communicator, docs/distributed.md.
#pragma once
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "train/loop/train_loop.h"
#include "train/sft/sft_config.h"

namespace vdt {

// The loop's result (steps reached, stopped by SIGTERM / SIGINT with the state saved when --save_state, every step's
// loss, gradient norm and time) and the run's.
struct SftSummary : LoopResult {
  int64_t start_step = 0;
  double s_per_step = 0, data_s_per_step = 0, peak_mem_gb = 0;
  std::string last_export, state_dir;  // state_dir: the newest state slot written or resumed from
  uint32_t weights_crc = 0;            // with several ranks: CRC-32 of every parameter's bytes at the end (equal)
  int64_t params = 0;                  // the model's parameter count (the adapter included)
  double predicted_peak_gb = 0;        // the memory plan's predicted peak per GPU (0: no plan)
  // Model FLOPs of a step on this rank in TFLOP (Denoiser::train_flops x batch x micro batches) and the MFU at the
  // mean s/step (RunContext::mfu; 0 on the CPU).
  double tflop_per_step = 0, mfu = 0;
};

// One process (CPU or one GPU).
SftSummary train_sft(const SftConfig& cfg);
// One rank of several (ZeRO-2 over `comm`; world 1 runs the replicated path). Every rank returns the summary; only
// rank 0 writes logs and exports. device_index: the GPU of this rank (LOCAL_RANK).
SftSummary train_sft(const SftConfig& cfg, Communicator& comm, int device_index);

}  // namespace vdt
