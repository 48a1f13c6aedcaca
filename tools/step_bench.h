// `vdt bench step`: the trainers' own steps, timed. `vdt train sft`, `causal` or `distill` runs warm-up + timed steps
// on a synthetic data root at the chosen latent geometry (tools/synth.h) with random weights, so what is timed is
// exactly what a user's step runs (its data loading overlaps in the loader). Reports the median of the timed steps,
// peak device memory and MFU from the base's model FLOPs (docs/BENCHMARKS.md). Several ranks (torchrun) run the trainer
// sharded, as training does. Not here: validation or the SFT export (off; the causal run's small LoRA file is written
// after the timed steps).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "train/loop/config_sections.h"
#include "train/loop/run_context.h"

namespace vdt {

struct StepBenchConfig {
  std::string trainer = "sft";  // sft | causal | distill
  std::string model = "wan2.2-ti2v-5b";
  int64_t frames = 21, height = 30, width = 52, text_len = 512;  // latent geometry: 21x30x52 = 8190 tokens
  int steps = 8, warmup = 3;
  int64_t lora_rank = 32;               // causal, distill (alpha = rank; distill: the critic's too)
  int64_t critic_ratio = 5;             // distill: a student update every N steps (timed steps: a multiple of N)
  double peak_tflops = kMfuPeakTflops;  // the H200's dense bf16 peak, the MFU denominator (docs/BENCHMARKS.md)
  std::string work_dir;                 // the synthetic root and the run; empty: a temp directory, removed after
                                        // (several nodes: give one on storage every rank sees)
  // The trainers' own sections (train/loop/config_sections.h): bound as the trainers bind them and handed to the
  // trainer whole. Precision: sft bf16 (weights and AdamW moments, as the peer), mixed or fp32; causal bf16 (a frozen
  // base) or fp32. Checkpointing none: sft only (the causal trainer always checkpoints).
  ComputeSection compute{.device = "cuda", .precision = "bf16"};
  MemorySection memory;               // --checkpointing, --selective-blocks, --memory: planned as the trainer plans
  CausalMemorySection causal_memory;  // causal only
  AttentionSection attention;         // causal only
  void validate() const;
  static const std::vector<ConfigField<StepBenchConfig>>& fields();
};

struct StepBenchResult {
  double median_s = 0, min_s = 0, max_s = 0;
  // distill: the mean of the timed steps (1 student update per critic_ratio critic updates, the peer's "mean step"),
  // and the medians of the steps with a student update (student + critic) and without (critic only)
  double mean_s = 0, student_step_s = 0, critic_step_s = 0;
  double peak_gib = 0;  // peak allocated device memory (CUDA), peak RSS (CPU)
  double tflop_per_step = 0, mfu = 0;
  int64_t params = 0, tokens = 0;  // tokens: video tokens
  int64_t rows = 0;                // every row the base runs on, text included (H3: + Picture 1 + audio)
  double last_loss = 0;
  double predicted_peak_gib = 0;       // the memory plan's (0: no plan; docs/planner.md)
  double host_pinned_gib = 0;          // the most pinned host memory held (causal: weight streaming, the offload)
  std::vector<double> step_s, losses;  // every step, warm-up included
};

StepBenchResult run_step_bench(const StepBenchConfig& cfg, Communicator& comm, int device_index = 0);

}  // namespace vdt
