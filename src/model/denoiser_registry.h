// Which family a model preset names, and building a denoiser of it (model/denoiser.h): the one place a new base
// family is added (its presets and its constructor); the trainers, validation, sampling and `vdt bench` build their
// model here and talk to it through the seam only.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "model/denoiser.h"
#include "model/lora.h"

namespace vdt {

// Every preset name, all families.
std::vector<std::string> denoiser_presets();
// The family of a preset ("wan", ...); throws listing the known presets.
std::string denoiser_family(const std::string& preset);
// The presets of one family ("wan", "h3"), in the registry's order.
std::vector<std::string> family_presets(const std::string& family);
// Facts of a preset's family that choices made before the model is built depend on (flags, the data to read):
// the latent frames of its natural block-causal chunk, and whether its base takes a Picture 1 image.
int64_t natural_chunk_frames(const std::string& preset);
bool takes_picture1(const std::string& preset);
// What base weights are, from their tensor names and shapes alone (no tensor is read): {family, preset}, the preset
// "custom" when the shapes match none. Keys that are neither a Wan DiT nor a MiniMax-H3 DiT throw (naming the file).
std::pair<std::string, std::string> detect_base(const SafetensorsSet& files);

// A denoiser of `preset` built on `options` (device, dtype): Wan with torch's default initialisation, H3 with zeros
// allocated on the device (no public init; the host init of 33B parameters would take minutes). Call init_weights or
// load weights after. `layers` > 0 overrides the preset's block count (benchmarks).
std::shared_ptr<Denoiser> make_denoiser(const std::string& preset, torch::TensorOptions options = {},
                                        int64_t layers = 0);

// The denoiser that weights describe (detect_base), built on `options` and not yet loaded: the architecture from the
// tensor shapes, or from the files' `model_config` metadata where a checkpoint recorded it (a Wan export). Custom
// shapes build too; the caller loads the weights (model/weights_io.h).
std::shared_ptr<Denoiser> denoiser_for_weights(const SafetensorsSet& files, torch::TensorOptions options = {});

// A LoRA file's modules in `model`'s naming: an H3 LoRA in diffusers' split q/k/v naming fused into the checkpoint's
// (model/h3/h3_lora.h); anything else unchanged. `where` names the file in errors.
LoraWeights lora_for_model(const Denoiser& model, const LoraWeights& w, const std::string& where);

// The rank and alpha a LoRA file gives once in `preset`'s naming (lora_for_model): an H3 LoRA in the split naming
// becomes rank 3r, alpha 3·alpha; anything else as the file says (read_lora_shape).
LoraShape lora_shape_for(const std::string& preset, const std::string& path);

}  // namespace vdt
