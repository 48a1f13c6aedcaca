// Configuration of `vdt train distill` (docs/distill.md): Self-Forcing's DMD with KV-cache rollouts, the student and
// the critic as two LoRAs on one frozen base that is also the teacher. A plain struct with validate(); every field is
// declared once in fields() (flag, help; the default is the initialiser here), from which the CLI binds the flags,
// --help shows the defaults, args.json and config.json are written and docs/cli.md's table is rendered. The knobs
// the other trainers share come from their sections (train/loop/config_sections.h), held here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/loop/config_sections.h"

namespace vdt {

struct DistillConfig {
  // run directory and where the run continues from
  std::string out;
  std::string resume = "auto";  // auto: the newest sealed state slot in --out; a run directory or slot of another run
  bool ignore_corrupt_state = false;
  // the base and the roles on it
  std::string data_root, text_table, model, weights;
  bool random_init = false;
  std::string init_lora;           // the student's start: a `vdt train causal` LoRA (empty or none: a fresh LoRA, said
                                   // loudly)
  std::string teacher_lora;        // empty: the teacher is the base alone
  int64_t lora_rank = -1;          // the student's; -1: --init-lora's, else 32
  double lora_alpha = -1;          // -1: --init-lora's, else the rank
  int64_t critic_rank = -1;        // -1: the student's rank
  double critic_alpha = -1;        // -1: the critic's rank
  double teacher_cfg = 0;          // guidance of the teacher (vdt's convention, as `vdt sample --cfg`); 0: the base's
  bool all_causal = false;         // teacher and critic block-causal too (LongLive); default bidirectional
  std::string history = "detach";  // detach (the paper); the released code's gradient through history is refused
  // the student and its rollout
  std::string student_steps = "1000,750,500,250";  // on the unshifted 1000-step clock
  double shift = 0;                                // 0: the base's sampling shift (Wan 5, MiniMax-H3 12)
  int64_t chunks = 6, min_chunks = 0;              // rollout chunks per step: drawn in [min_chunks, chunks]
  int64_t chunk_frames = 0;                        // 0: the base's natural chunk
  std::string picture1 = "native";
  bool clean_first_frame = false;  // the student LoRA's: the first latent frame is the clean conditioning frame
  // the loop
  int64_t steps = 600, critic_ratio = 5;
  double lr = 1e-5, critic_lr = 2e-6;
  double beta1 = 0.0, beta2 = 0.999, weight_decay = 0.01, grad_clip = 10.0;
  double ema = 0.99;
  int64_t ema_start = 200;
  int64_t save_every = 100, val_every = 0, val_clips = 1, max_samples = 0;
  RandomSection random;  // --seed
  // shared sections
  ComputeSection compute{.precision = "bf16"};  // --device, --precision (bf16 or fp32), --fused-kernels, --fp8
  MemorySection memory;                         // --checkpointing, --selective-blocks, --memory
  AttentionSection attention;                   // --attn
  std::string shard_base = "auto";              // auto: on with several ranks; on; off

  static constexpr int64_t kDefaultLoraRank = 32;
  enum class History { detach };
  enum class ShardBase { automatic, on, off };
  History history_mode() const;
  ShardBase shard_mode() const;
  Precision precision_mode() const;  // bf16 or fp32
  Checkpointing checkpointing_mode() const;
  // The memory knobs parsed once (train/plan/memory_knobs.h), with the ones the command line fixed: the plan's input.
  MemoryFlags memory_flags() const;
  std::vector<int64_t> student_step_list() const;  // --student-steps parsed (an error names the flag)
  int64_t rollout_min_chunks() const { return min_chunks > 0 ? min_chunks : chunks; }
  // --init-lora as a file: empty when a fresh student LoRA is asked for (left out, or `none` as vdt train causal takes
  // it).
  std::string init_lora_file() const { return init_lora == "none" ? std::string() : init_lora; }
  void validate() const;  // throws naming the flag, the value and what is expected
  std::string to_json() const;
  static const std::vector<ConfigField<DistillConfig>>& fields();
};

}  // namespace vdt
