// The typed knobs (memory_knobs.h): their checks, the checkpointing runner's options, the flags that set them.
#include "train/plan/memory_knobs.h"

#include <cstdio>

namespace vdt {

const char* precision_name(Precision p) {
  return p == Precision::mixed ? "mixed" : p == Precision::bf16 ? "bf16" : "fp32";
}

CheckpointOptions MemoryKnobs::checkpoint_options() const {
  CheckpointOptions co;
  co.offload_inputs = act_offload;
  co.selective = checkpointing == Checkpointing::selective;
  co.selective_blocks = selective_blocks;
  co.attention_keep = attn_keep;
  return co;
}

void MemoryKnobs::check() const {
  check_selective_blocks(selective_blocks, checkpointing);
  check_attention_keep(attn_keep, attn == CausalKernel::prefix, checkpointing, selective_blocks);
}

std::string MemoryKnobs::flags(bool causal) const {
  std::string s = std::string("--checkpointing ") + checkpointing_name(checkpointing);
  if (checkpointing == Checkpointing::selective) s += " --selective-blocks " + std::to_string(selective_blocks);
  if (act_offload) s += " --act-offload on";
  if (causal) {
    char keep[32];
    std::snprintf(keep, sizeof keep, "%g", attn_keep);
    s += std::string(" --attn-keep ") + keep + " --attn " + causal_kernel_name(attn);
    if (stream_blocks > 0)
      s +=
          " --stream-blocks " + std::to_string(stream_blocks) + " --stream-prefetch " + std::to_string(stream_prefetch);
    if (fp8_base) s += " --base-dtype fp8";
  }
  return s;
}

}  // namespace vdt
