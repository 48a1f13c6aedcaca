// LoRA weights (SPEC §1): for a target Linear `<module>` with weight W [out, in], A [r, in] and B [out, r] add
// (alpha / r) * B A to W. Files: `<module>.lora_A.weight`, `<module>.lora_B.weight` with `rank`, `alpha` and `base`
// in the metadata; PEFT's names (`base_model.model.<module>.lora_A.default.weight`, or without the prefix) load too.
// Here: reading either naming, which modules are targets, folding a LoRA into base weights (`vdt ckpt merge-lora`)
// and the unmerged forward it must equal. Not here: wrapping a built model's Linears for training (the causal
// workflow attaches that from outside the model code).
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace vdt {

struct LoraConfig {
  int64_t rank = 16;
  double alpha = 16;
  std::vector<std::string> targets = {"q", "k", "v", "o", "ffn.0", "ffn.2"};  // last module-name components
  double scale() const { return alpha / static_cast<double>(rank); }
};

// True when `module` (e.g. "blocks.3.self_attn.q", "blocks.0.ffn.2") ends in one of `targets` as whole components.
bool is_lora_target(const std::string& module, const std::vector<std::string>& targets);

struct LoraPair {
  torch::Tensor a, b;  // A [r, in], B [out, r]
};

struct LoraWeights {
  std::map<std::string, LoraPair> modules;  // by module name, in our naming
  int64_t rank = 0;
  double alpha = 0;
  std::string base;
};

// Reads a LoRA file (ours or PEFT's naming). Rank comes from the tensors; alpha from the metadata (`alpha` or
// `lora_alpha`), else `default_alpha` (PEFT files often carry none; 0 means: alpha = rank). A module with only A
// or only B, or with shapes that do not chain, is an error naming the file and the key.
LoraWeights read_lora(const std::string& path, double default_alpha = 0);

// The module name of a LoRA key in either naming ("" when the key is not a LoRA tensor); `which` gets 'A' or 'B'.
std::string lora_module_of(const std::string& key, char* which);

// Base weights with every LoRA module folded in: W + scale * B A, in float32, cast back to W's dtype. A LoRA module
// whose `<module>.weight` is not in the base, or whose shapes do not match it, is an error naming both.
std::vector<std::pair<std::string, torch::Tensor>> merge_lora(const SafetensorsSet& base, const LoraWeights& lora,
                                                              double scale);

// The unmerged LoRA forward: x W^T + b + scale * (x A^T) B^T (the reference a merge must equal).
torch::Tensor lora_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                          const LoraPair& lora, double scale);

}  // namespace vdt
