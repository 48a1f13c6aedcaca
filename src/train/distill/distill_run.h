// What one distillation run holds once it is built (the trainer's build_* fill it; the step, the files and the
// resume read it): the one frozen base with its LoRA sets (the student, "" — the default set, saved as a causal
// LoRA —, the critic, "critic", and an optional frozen "teacher"), the two update paths, the EMA, the data, the
// student's steps. Not here: what a step computes (distill_step.h) or writes (distill_state.h).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "data/causal_dataset.h"
#include "distributed/block_shards.h"
#include "distributed/grad_sync.h"
#include "model/denoiser.h"
#include "train/distill/distill_config.h"
#include "train/loop/run_context.h"
#include "train/loop/run_dir.h"
#include "train/loop/run_log.h"
#include "train/plan/memory_knobs.h"
#include "train/plan/memory_plan.h"

namespace vdt {

inline const std::string kStudentSet = "";  // the default set: its factors carry the causal LoRA's names
inline const std::string kCriticSet = "critic";
inline const std::string kTeacherSet = "teacher";

struct DistillRun {
  DistillConfig cfg;
  std::unique_ptr<RunContext> ctx;
  std::unique_ptr<RunDirLock> lock;  // rank 0: this process owns --out
  std::unique_ptr<CausalDataset> ds;
  std::shared_ptr<Denoiser> model;  // the one resident base: student, critic and teacher
  NamedTensors student, critic;     // float32 factors, by checkpoint name (each set under the file's names)
  NamedTensors ema;                 // float32 copies of the student's factors (empty before --ema-start)
  std::unique_ptr<GradSync> student_sync, critic_sync;
  std::unique_ptr<Communicator> node_comm;  // this rank's node, when the world spans several (outlives shards)
  std::unique_ptr<BlockShards> shards;
  std::string teacher_role = kNoLora;  // the teacher's set: the base alone, or kTeacherSet with --teacher-lora
  std::vector<int64_t> student_steps;  // --student-steps
  std::vector<double> student_t;       // the student's timesteps on the shifted grid (0..1000)
  double shift = 0, teacher_cfg = 1;   // resolved: the base's when the flags are 0
  bool round_timestep = true;          // the base's rule (flow_schedule)
  int64_t base_params = 0;
  int64_t start_step = 0, student_updates = 0, critic_updates = 0;  // updates done (AdamW's step counts)
  std::string state_slot, resume_how, lora_start;
  std::vector<int64_t> perm;
  int64_t perm_epoch = -1;
  RunLog log;
  MemoryFlags flags;  // the memory knobs as the command line gave them (parsed once)
  MemoryKnobs knobs;  // what the run applies: the flags', then the plan's
  std::optional<Plan> plan;

  // Self-Forcing updates the generator when its 0-based step % ratio == 0: steps 1, 1 + ratio, ... here (1-based).
  bool student_step(int64_t step) const { return (step - 1) % cfg.critic_ratio == 0; }
};

}  // namespace vdt
