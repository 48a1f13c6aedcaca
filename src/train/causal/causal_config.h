// Configuration of `vdt train causal`: the Python trainer rtcwm's flags with its names and defaults (docs/design.md
// §5), plus --model,
// --weights, --chunk-frames, --lora-rank, --lora-alpha, and the data and device flags our trainer needs. A plain
// struct with validate(); every field is declared once in fields() (flag, help; the default is the initialiser here),
// from which the CLI binds the flags and to_json writes args.json. The knobs the SFT trainer and `vdt bench step`
// share come from their sections (train/loop/config_sections.h), held here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "generate/lora_file.h"
#include "model/denoiser.h"
#include "train/loop/config_sections.h"

namespace vdt {

inline constexpr int64_t kSpanChunks = 6;  // the Python trainer's SPAN_CHUNKS

struct CausalConfig {
  // the Python trainer's flags
  // init_lora: a LoRA file, "none" (a fresh LoRA, B = 0, chosen), or empty (left out: fresh on a Wan base; on a
  // MiniMax-H3 base, whose Python trainer continues the released CWM LoRA, an error asking for the choice)
  std::string out, objective = "df", init_lora;
  std::string resume =
      "auto";  // the SFT trainer's flag: auto (the Python trainer's re-run rule), a LoRA file, or a state
  bool ignore_corrupt_state =
      false;          // every sealed slot in --out corrupt: resume as the Python trainer (fresh moments)
  int64_t steps = 0;  // 0: ceil(epochs * samples / world)
  double epochs = 2.0, lr = 2e-5, lr_min = 1e-6;
  int64_t warmup = 10, save_every = 10, val_clips = 12, max_samples = 0;
  RandomSection random;  // --seed
  std::string picture1 = "native";
  AttentionSection attention;         // --attn
  MemorySection memory;               // --checkpointing block or selective (always checkpointed), --selective-blocks
  CausalMemorySection causal_memory;  // --act-offload, --attn-keep
  double level_shift = 3.0;
  // ours
  // model empty: the data root's family and the preset of the weights' shapes (the trainer resolves it)
  std::string data_root, text_table, model, weights;
  ComputeSection compute{.precision = "bf16"};  // --device, --precision (bf16 or fp32), --fused-kernels, --fp8
  bool random_init = false;  // a random frozen base; required (and exclusive with --weights) when no base is given
  int64_t chunk_frames = 0;  // 0: the base's natural chunk (set by the trainer)
  // -1 (left out): the LoRA this run starts from decides (--init-lora, --resume X, the newest lora_step in --out),
  // else kDefaultLoraRank / alpha = rank. Given, they must be positive and agree with that file (an error names both).
  int64_t lora_rank = -1;
  double lora_alpha = -1;
  static constexpr int64_t kDefaultLoraRank = 32;
  bool clean_first_frame = false;   // Picture-1 style: the span's first latent frame clean, timestep 0, no loss
  std::string shard_base = "auto";  // auto: on with several ranks; on; off
  int64_t val_every = 0;  // beyond the Python trainer: mean loss over the val windows (fixed levels and noise) every N
                          // steps and before the first, into val_log.jsonl; 0 = never
  int64_t preview_steps = 8;  // with --val-every on a root with vae.safetensors: Euler steps of the sample preview of
                              // val window 0 drawn at each validation (previews/, TensorBoard images); 0 = none
  int64_t val_sample_every = 0;  // every N steps: val window 0 streamed with the KV cache (--preview-steps Euler
                                 // steps), its grid in TensorBoard on a root with a preview VAE; 0 = never

  int64_t span_frames() const { return kSpanChunks * chunk_frames; }
  // The --init-lora file to start from: empty when left out or "none".
  std::string init_lora_file() const { return init_lora == kNoInitLora ? std::string() : init_lora; }
  static constexpr const char* kNoInitLora = "none";
  // The enum-like flags as enums (validate() checks them; an unknown value is an error naming the flag).
  enum class Objective { df, tf };
  enum class ShardBase { automatic, on, off };
  Objective objective_mode() const;
  Checkpointing checkpointing_mode() const;  // block or selective
  ShardBase shard_mode() const;
  Precision precision_mode() const;  // bf16 or fp32
  // The memory knobs parsed once, with those the command line fixed: what the trainer hands the memory plan and,
  // planned or not, applies (train/plan/startup_plan.h).
  MemoryFlags memory_flags() const;
  void validate() const;  // throws naming the flag, the value and what is expected
  // --picture1 2048 on a base without a Picture 1 input is an error; nothing to check while --model is empty.
  void check_picture1_base() const;
  std::string to_json() const;  // every field as a string, as the Python trainer's args.json
  // The metadata of this run's LoRA file at `step` (generate/lora_file.h); its `base` and `text_handling` from the
  // built base (Denoiser::lora_base_info).
  LoraFileMeta lora_file_meta(const Denoiser& base, int64_t step) const;
  static const std::vector<ConfigField<CausalConfig>>& fields();
};

}  // namespace vdt
