// `vdt ckpt export`: a vdt checkpoint (an SFT export step-N.safetensors, any Wan DiT weights vdt reads, or a LoRA)
// in the layouts other tools load without code:
//   diffusers: a DiT -> a WanTransformer3DModel directory (config.json + diffusion_pytorch_model.safetensors,
//   diffusers'
//              names); a LoRA -> pytorch_lora_weights.safetensors ("transformer." + diffusers' module names, rank and
//              alpha in the "lora_adapter_metadata" JSON that diffusers' load_lora_weights reads);
//   comfy:     a DiT -> one file under "model.diffusion_model." + the original Wan names; a LoRA -> "diffusion_model."
//              + module names with a scalar "<module>.alpha" per module (what ComfyUI and diffusers' converter read).
// Neither target model has vdt's gc_sem_cond adapter: a checkpoint holding it needs drop_adapter (the exported model
// then ignores semantic maps).
// Not here: the name table (model/wan_key_names.h), printing (cli/ckpt.cpp).
#pragma once
#include <string>
#include <vector>

#include "train/loop/config_fields.h"

namespace vdt {

struct ExportConfig {
  std::vector<std::string> files;  // the shards of one checkpoint, or one LoRA file
  std::string format;              // diffusers | comfy
  std::string out;  // diffusers DiT: a directory; otherwise a .safetensors file (a directory gets a default name)
  bool drop_adapter = false;
  // Attention heads of a DiT (shapes cannot tell them; diffusers' config needs them): 0 = from the file's "config"
  // metadata (ModelConfig JSON), else from the preset its shapes match; a custom-width DiT without either needs it.
  int64_t num_heads = 0;
  void validate() const;
  static const std::vector<ConfigField<ExportConfig>>& fields();
};

struct ExportReport {
  std::string kind;     // "dit" or "lora"
  std::string written;  // the file written (diffusers DiT: the weights file inside the directory)
  int64_t tensors = 0, dropped = 0;
};

ExportReport export_ckpt(const ExportConfig& cfg);

}  // namespace vdt
