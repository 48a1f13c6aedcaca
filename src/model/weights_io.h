// Loading and exporting model weights by checkpoint key name. The module tree is registered under the checkpoint
// names, so the mapping is the identity; the one renaming accepted (an optional "model." prefix, as DiffSynth
// strips) lives here. Loading is strict: missing and unexpected keys are listed in one error.
// Not here: optimizer state, training metadata (train/checkpoint).
#pragma once
#include <torch/nn/module.h>

#include <set>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/config.h"

namespace vdt {

struct LoadOptions {
  // Keys of the model under these prefixes may be absent from the files (they keep their current values), e.g.
  // "gc_sem_cond." when warm-starting the adapter model from a plain Wan export.
  std::vector<std::string> optional_prefixes;
  // Keys in the files under these prefixes are skipped instead of being reported as unexpected.
  std::vector<std::string> ignore_prefixes = {"fixture."};
};

struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> kept;  // optional model keys absent from the files
};

// True when `s` starts with one of `prefixes`.
bool has_prefix(const std::string& s, const std::vector<std::string>& prefixes);
// Up to 20 names, one per indented line, then "... and N more": how load errors list keys.
std::string name_list(const std::vector<std::string>& names);

// The weight files behind a flag: a .safetensors file itself, or every *.safetensors in a directory (sharded
// checkpoints), sorted. An empty directory is an error naming `flag`.
std::vector<std::string> weight_files(const std::string& file_or_dir, const std::string& flag);

// Copies every parameter and buffer of `module` from `files` (converting dtype, keeping the module's device).
// Throws one error listing missing keys, unexpected keys and shape mismatches, naming the files.
LoadReport load_weights(torch::nn::Module& module, const SafetensorsSet& files, const LoadOptions& opts = {});

// (name, parameter) for every parameter, under its checkpoint name (the tensors themselves, not copies).
NamedTensors named_parameters(const torch::nn::Module& module);

// (name, tensor) for every parameter, cast to `dtype` (e.g. BF16 for export), names as in the checkpoint.
std::vector<std::pair<std::string, torch::Tensor>> export_weights(const torch::nn::Module& module,
                                                                  torch::ScalarType dtype);

// Architecture from the tensor shapes of `files` (see detect_config).
ModelConfig detect_config(const SafetensorsSet& files);

}  // namespace vdt
