// Names of Wan DiT weights in the layouts users already have: ours (the released Wan / DiffSynth names, e.g.
// "blocks.0.self_attn.q.weight"), diffusers' WanTransformer3DModel ("blocks.0.attn1.to_q.weight"), and the prefixes
// ComfyUI ("model.diffusion_model.") and DiffSynth ("model.") add. The table is in docs/design.md §1.
// Here: translating one name either way. Not here: reading or writing files (weights_io, tools/ckpt_export).
#pragma once
#include <string>

namespace vdt {

// Our name -> diffusers' name for a parameter (or a module path: "blocks.3.ffn.0" -> "blocks.3.ffn.net.0.proj").
// A name outside the table (e.g. gc_sem_cond.*) is returned unchanged.
std::string wan_to_diffusers(const std::string& name);

// Diffusers' name -> ours; "" when `name` is not a WanTransformer3DModel name of the table.
std::string wan_from_diffusers(const std::string& name);

// The key without the "model.diffusion_model." (ComfyUI), "diffusion_model." or "model." (DiffSynth) prefix.
std::string strip_wrapper_prefix(const std::string& key);

// True when `key` (prefix stripped) is a name only diffusers' WanTransformer3DModel has: a file holding
// "condition_embedder.time_proj.weight" is in diffusers' layout.
bool is_diffusers_wan_key(const std::string& key);

// A stored key -> our name: the prefix stripped and, for a file in diffusers' layout (`diffusers`), its names mapped.
// Only a diffusers file is mapped: other models' names (MiniMax-H3 has blocks.N.norm2) pass through untouched.
std::string wan_canonical_key(const std::string& key, bool diffusers);

}  // namespace vdt
