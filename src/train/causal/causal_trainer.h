// `vdt train causal` (the Python trainer rtcwm/train/train.py): LoRA on a frozen base (Wan or MiniMax-H3), trained with
// diffusion forcing (`df`) or teacher forcing (`tf`) on 6-chunk spans under block-causal self-attention. One window per
// rank per step, from a global sample stream that depends on (seed, epoch, sample) only; frozen base blocks sharded
// over the ranks and gathered per block (distributed/block_shards.h); LoRA replicated, gradients all-reduced as
// backward produces them (distributed/grad_sync.h); cosine LR with warmup, AdamW (0.9, 0.999, wd 0.01), clip 1.0;
// per-block activation checkpointing, optionally with the kept inputs on the host (--act-offload). A re-run with the
// same --out continues from the newest lora_stepNNNNN.safetensors, exactly when its state slot is there
// (train/checkpoint/lora_checkpoint.h). docs/causal.md has the files and the resume rules.
#pragma once
#include <string>

#include "distributed/communicator.h"
#include "model/denoiser.h"
#include "train/causal/causal_config.h"
#include "train/checkpoint/lora_checkpoint.h"
#include "train/loop/train_loop.h"

namespace vdt {

// The loop's result (steps reached, stopped by SIGTERM / SIGINT with the LoRA and state saved, every step's loss,
// gradient norm and time) and the run's.
struct CausalSummary : LoopResult {
  int64_t start_step = 0, total_steps = 0;
  double s_per_step = 0, peak_mem_gb = 0;
  std::string last_lora, resume_how;
  std::string lora_start;  // where the LoRA came from: "fresh ..." (B = 0), the --init-lora file, or "continued ..."

  NamedTensors lora;             // this rank's float32 factors at the end (ranks must hold the same)
  uint32_t lora_crc = 0;         // CRC-32 of those factors' bytes
  int64_t params = 0;            // the frozen base's and the LoRA's parameter count
  int shard_ranks = 1;           // the ranks one copy of the frozen base is sharded over (each node's, or the world's)
  int64_t shard_bytes = 0;       // of the frozen blocks, held by this rank (0: not sharded)
  double predicted_peak_gb = 0;  // the memory plan's predicted peak per GPU (0: no plan)
  double pinned_host_gb = 0;     // the most pinned host memory held (pinned_host_gb: streaming, offload)
  // Model FLOPs of a step on this rank in TFLOP (Denoiser::train_flops of the window, frozen base: block-causal pairs
  // counted) and the MFU at the mean s/step (RunContext::mfu; 0 on the CPU).
  double tflop_per_step = 0, mfu = 0;
};

CausalSummary train_causal(const CausalConfig& cfg);  // one process
// One rank of several; every rank returns the summary, rank 0 writes the files. device_index: LOCAL_RANK's GPU.
CausalSummary train_causal(const CausalConfig& cfg, Communicator& comm, int device_index);

}  // namespace vdt
