// `vdt sample` run from its config (tools/sample_config.h): the model built (an SFT export, or a causal LoRA's base
// with the LoRA, generate/generation_model.h), each val clip or window generated through the generation layer
// (generate/clip_sampling.h, generate/window.h) and written under --out: safetensors of the samples, each streamed
// chunk as it is done, and PNG previews on a root with a preview VAE. Not here: flags, embedding new prompts.
#pragma once
#include <string>

#include "tools/sample_config.h"

namespace vdt {

// `text_table`: the root's text table with the new prompts (cfg.new_prompts()) embedded; empty without new prompts.
// Returns the exit code.
int run_sample(const SampleConfig& cfg, const std::string& text_table);

}  // namespace vdt
