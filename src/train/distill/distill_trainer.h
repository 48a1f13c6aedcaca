// `vdt train distill` (docs/distill.md): a few-step causal student distilled from the base with Self-Forcing's DMD
// and KV-cache rollouts. Student, critic and teacher are calls on ONE resident frozen base: the student = base +
// student LoRA (block-causal, chunk by chunk with the KV cache), the critic = base + critic LoRA (B = 0 at the start),
// the teacher = the base alone (or + a frozen --teacher-lora), guided against the null prompt; the LoRA set is
// switched per call (model/lora.h). One critic update every step, one student update every --critic-ratio steps
// (AdamW, the gradients all-reduced over the ranks, the frozen blocks sharded per node as the causal trainer's),
// an EMA of the student; exact resume of all of it (distill_state.h). Not here: the step's parts (distill_step.h).
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "core/safetensors.h"
#include "distributed/communicator.h"
#include "train/distill/distill_config.h"
#include "train/loop/train_loop.h"

namespace vdt {

struct DistillSummary : LoopResult {
  int64_t start_step = 0, total_steps = 0;
  double s_per_step = 0, peak_mem_gb = 0;
  std::string last_lora, resume_how, lora_start;
  std::vector<double> critic_losses, student_losses, dmd_grad_norms;  // every step of this process (student: NaN on
  std::vector<int64_t> exit_indices;                                  // steps without a student update)
  int64_t base_params = 0, student_params = 0, critic_params = 0;
  NamedTensors student, critic, ema;  // this rank's float32 factors at the end, on the host
  uint32_t student_crc = 0, critic_crc = 0;
  // Model FLOPs of a mean step in TFLOP (rollouts, the exit steps' backward, teacher, critic) and the MFU.
  double tflop_per_step = 0, mfu = 0;
  double predicted_peak_gb = 0;
};

struct DistillRun;  // distill_run.h

// The run as train_distill builds it (the base with its LoRA sets, the data, both update paths, the resume), without
// the loop: tests and `vdt bench step --trainer distill`. Holds --out's lock (rank 0) while it lives.
std::unique_ptr<DistillRun> build_distill_run(const DistillConfig& cfg, Communicator& comm, int device_index);
// One training step of a built run (the student update when `step` is one, the critic update); returns the critic's
// loss and, on a student step, the student's (NaN otherwise), both reduced over the ranks.
std::pair<double, double> run_distill_step(DistillRun& r, int64_t step);
// The model FLOPs of a mean step in TFLOP (the summary's tflop_per_step).
double distill_step_tflop(const DistillRun& r);

DistillSummary train_distill(const DistillConfig& cfg);  // one process
// One rank of several; every rank returns the summary, rank 0 writes the files. device_index: LOCAL_RANK's GPU.
DistillSummary train_distill(const DistillConfig& cfg, Communicator& comm, int device_index);

}  // namespace vdt
