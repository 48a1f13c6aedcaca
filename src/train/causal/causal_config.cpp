#include "train/causal/causal_config.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "core/error.h"

namespace vdt {

std::string py_float(double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

void CausalConfig::validate() const {
  VDT_CHECK(!out.empty(), "--out is required (the run directory; a re-run with the same --out continues)");
  VDT_CHECK(!data_root.empty(), "--data-root is required (a data root, docs/data_format.md)");
  VDT_CHECK(objective == "df" || objective == "tf", "--objective: expected df (diffusion forcing) or tf (teacher "
            "forcing), got '", objective, "'");
  VDT_CHECK(steps >= 0, "--steps ", steps, ": expected >= 0 (0 = epochs * samples / world)");
  VDT_CHECK(steps > 0 || epochs > 0, "--epochs ", epochs, ": expected > 0 when --steps is 0");
  VDT_CHECK(lr > 0, "--lr ", lr, ": expected > 0");
  VDT_CHECK(lr_min >= 0 && lr_min <= lr, "--lr-min ", lr_min, ": expected 0 <= lr-min <= --lr (", lr, ")");
  VDT_CHECK(warmup >= 0, "--warmup ", warmup, ": expected >= 0");
  VDT_CHECK(save_every >= 1, "--save-every ", save_every, ": expected >= 1");
  VDT_CHECK(picture1 == "native" || picture1 == "2048", "--picture1: expected native or 2048, got '", picture1, "'");
  VDT_CHECK(picture1 == "native", "--picture1 2048 applies to the MiniMax-H3 base (its Picture 1 image), which vdt does "
            "not train yet; the Wan bases take --picture1 native");
  VDT_CHECK(attn == "prefix" || attn == "mask" || attn == "fa3" || attn == "flex", "--attn: expected prefix (one SDPA "
            "call per chunk; the seed's fa3) or mask (one masked call; the seed's flex), got '", attn, "'");
  VDT_CHECK(act_offload == "on" || act_offload == "off", "--act-offload: expected on or off, got '", act_offload, "'");
  VDT_CHECK(level_shift > 0, "--level-shift ", level_shift, ": expected > 0");
  VDT_CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device: expected auto, cpu or cuda, got '",
            device, "'");
  VDT_CHECK(precision == "bf16" || precision == "fp32", "--precision: expected bf16 (frozen bf16 base, fp32 LoRA) or "
            "fp32, got '", precision, "'");
  VDT_CHECK(chunk_frames >= 1, "--chunk-frames ", chunk_frames, ": expected >= 1");
  VDT_CHECK(lora_rank >= 1, "--lora-rank ", lora_rank, ": expected >= 1");
  VDT_CHECK(lora_alpha > 0, "--lora-alpha ", lora_alpha, ": expected > 0");
  VDT_CHECK(val_every >= 0, "--val-every ", val_every, ": expected >= 0 (0 = never)");
  VDT_CHECK(shard_base == "auto" || shard_base == "on" || shard_base == "off", "--shard-base: expected auto, on or "
            "off, got '", shard_base, "'");
}

std::string CausalConfig::to_json() const {
  auto s = [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      return py_float(v);
    } else {
      return std::to_string(v);
    }
  };
  nlohmann::ordered_json j = {
      {"out", out}, {"objective", objective}, {"init_lora", init_lora}, {"steps", s(steps)}, {"epochs", s(epochs)},
      {"lr", s(lr)}, {"lr_min", s(lr_min)}, {"warmup", s(warmup)}, {"save_every", s(save_every)},
      {"val_clips", s(val_clips)}, {"max_samples", s(max_samples)}, {"seed", s(seed)}, {"picture1", picture1},
      {"attn", attn}, {"level_shift", s(level_shift)}, {"act_offload", act_offload}, {"data_root", data_root},
      {"text_table", text_table}, {"model", model}, {"weights", weights}, {"device", device},
      {"precision", precision}, {"chunk_frames", s(chunk_frames)}, {"lora_rank", s(lora_rank)},
      {"lora_alpha", s(lora_alpha)}, {"clean_first_frame", clean_first_frame ? "True" : "False"},
      {"shard_base", shard_base}, {"val_every", s(val_every)}};
  return j.dump(1);
}

}  // namespace vdt
