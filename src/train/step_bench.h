// `vdt bench step`: one full SFT training step (forward, flow-matching loss, backward, clip, AdamW) at a chosen
// geometry with random weights, timed per step (median after warm-up), with peak device memory and MFU against the
// model FLOPs of SPEC §9. Not here: data loading or validation (the trainer); this isolates the compute step.
#pragma once
#include <functional>
#include <string>

#include "model/config.h"

namespace vdt {

struct StepBenchConfig {
  std::string model = "wan2.2-ti2v-5b";
  int64_t layers = 0;                      // 0: the preset's
  int64_t frames = 21, height = 30, width = 52, text_len = 512;  // latent geometry: 21x30x52 = 8190 tokens
  int steps = 8, warmup = 3;
  std::string checkpointing = "block";     // block | none
  std::string precision = "bf16";          // bf16 (weights and AdamW moments, as the peer) | fp32
  std::string device = "cuda";
  double peak_tflops = 790;                // dense bf16 rate used for MFU (SPEC §9)
  void validate() const;
};

struct StepBenchResult {
  double median_s = 0, min_s = 0, max_s = 0;
  double peak_gib = 0;      // peak allocated device memory (CUDA only)
  double tflop_per_step = 0, mfu = 0;
  int64_t params = 0, tokens = 0;
  double last_loss = 0;
};

// Model FLOPs of one training step (forward + backward = 3x forward, recomputation not counted), SPEC §9's count.
double train_flops_per_step(const ModelConfig& cfg, int64_t tokens, int64_t text_len, int64_t batch = 1);

StepBenchResult run_step_bench(const StepBenchConfig& cfg,
                               const std::function<void(int step, double seconds, double loss)>& on_step = {});

}  // namespace vdt
