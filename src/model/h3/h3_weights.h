// H3 DiT weights by checkpoint key name (the module tree is the checkpoint's, so the mapping is the identity; an
// optional "model." prefix is accepted as in model/weights_io): the architecture detected from a file set, a strict
// check of a file set against a config before anything is allocated, loading, and export in the release dtypes.
// Not here: LoRA files (model/lora) or training state (train/).
#pragma once
#include "core/safetensors.h"
#include "model/h3/h3_config.h"
#include "model/h3/h3_dit.h"
#include "model/weights_io.h"

namespace vdt {

// Architecture from the tensor shapes of `files` (see detect_h3_config).
H3Config detect_h3_config(const SafetensorsSet& files);

// Throws one error listing missing keys, unexpected keys and shape mismatches of `files` against `cfg`, without
// building the model (the 33B model would take 66 GB before load_weights could say so). Keys under
// opts.ignore_prefixes ("fixture." by default) are skipped.
void check_h3_weights(const SafetensorsSet& files, const H3Config& cfg, const LoadOptions& opts = {});

// check_h3_weights, then load_weights: every parameter and the rope.inv_freq buffer, converted to each tensor's
// own dtype (so a model in release precision keeps its fp32 islands).
LoadReport load_h3_weights(H3DiTImpl& model, const SafetensorsSet& files, const LoadOptions& opts = {});

// (name, tensor) for every parameter and buffer (535 for minimax-h3), detached, in the model's own dtypes; with
// `dtype` set, everything but the fp32 islands is cast to it (the release checkpoint's layout for bf16).
NamedTensors export_h3_weights(const H3DiTImpl& model, std::optional<torch::ScalarType> dtype = std::nullopt);

}  // namespace vdt
