// An H3 LoRA saved in the split naming of diffusers / DiffSynth's converter (docs/h3_model.md §1.9: the attention
// projections `transformer_blocks.N.attn.to_q|to_k|to_v`, `attn.to_out.0`, the MLP `ff.net.0.proj` with rows [up; gate]
// and `ff.net.2`, the refiner's `token_refiner.refiner_blocks.N.…`, optionally under `transformer.`) turned into vdt's
// names, which are the original checkpoint's (`blocks.N.attn.qkv_proj`, `attn.out_proj`, `mlp.fc1` [gate; up],
// `mlp.fc2`).
// q/k/v of rank r fuse into one `qkv_proj` LoRA of rank 3r: A = [A_q; A_k; A_v] [3r, in] and B block-diagonal
// [3 N Dh, 3r] with its rows in the fused per-head-interleaved order (row = h·3Dh + {q,k,v}·Dh + d). A vdt LoRA file
// has one rank, so every other module is padded to 3r with zero rows of A and zero columns of B, and alpha becomes
// 3·alpha: each module's (alpha / rank) B A is exactly the file's. (Training on from it keeps the padding at zero.)
#pragma once
#include <cstdint>

#include "core/safetensors.h"
#include "model/lora.h"

namespace vdt {

// True when `w` holds a module in the split naming.
bool h3_lora_is_split(const LoraWeights& w);

// `w` in vdt's names (above); `head_dim` is the base's Dh. A module that is neither split nor vdt-named H3 is an
// error naming it.
LoraWeights h3_lora_from_split(const LoraWeights& w, int64_t head_dim, const std::string& where);

// h3_lora_from_split with Dh read from an H3 base's weights (`blocks.0.attn.q_norm.weight`), for `vdt ckpt
// merge-lora`; `w` unchanged when it is not split. A split LoRA on a base that is not H3 is an error.
LoraWeights h3_lora_for_base(const LoraWeights& w, const SafetensorsSet& base, const std::string& where);

}  // namespace vdt
