// Configuration of `vdt train causal`: the seed rtcwm's flags with its names and defaults (SPEC §5), plus --model,
// --weights, --chunk-frames, --lora-rank, --lora-alpha, and the data and device flags our trainer needs. A plain
// struct with validate(); every field is declared once in fields() (flag, help; the default is the initialiser here),
// from which the CLI binds the flags and to_json writes args.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/loop/config_fields.h"

namespace vdt {

inline constexpr int64_t kSpanChunks = 6;  // the seed's SPAN_CHUNKS

struct CausalConfig {
  // the seed's flags
  std::string out, objective = "df", init_lora;  // init_lora empty: a fresh LoRA (B = 0)
  int64_t steps = 0;                              // 0: ceil(epochs * samples / world)
  double epochs = 2.0, lr = 2e-5, lr_min = 1e-6;
  int64_t warmup = 10, save_every = 10, val_clips = 12, max_samples = 0;
  uint64_t seed = 0;
  std::string picture1 = "native", attn = "prefix", act_offload = "off";
  double level_shift = 3.0;
  // ours
  std::string data_root, text_table, model = "wan2.2-ti2v-5b", weights, device = "auto", precision = "bf16";
  int64_t chunk_frames = 3, lora_rank = 32;
  double lora_alpha = 32;
  bool clean_first_frame = false;  // Picture-1 style: the span's first latent frame clean, timestep 0, no loss
  std::string shard_base = "auto";  // auto: on with several ranks; on; off
  int64_t val_every = 0;  // beyond the seed: mean loss over the val windows (fixed levels and noise) every N steps
                          // and before the first, into val_log.jsonl; 0 = never

  int64_t span_frames() const { return kSpanChunks * chunk_frames; }
  void validate() const;        // throws naming the flag, the value and what is expected
  std::string to_json() const;  // every field as a string, as the seed's args.json
  static const std::vector<ConfigField<CausalConfig>>& fields();
};

}  // namespace vdt
