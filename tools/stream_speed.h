// The speed knobs of streaming generation (`vdt sample --stream`, `vdt bench sample`), declared once: FP8 GEMMs in the
// blocks (distributed/fp8_blocks.h, which the generation layer does not see), CUDA graphs of the passes, the LoRA
// folded into the base, blocks whose frozen weights stream from host memory (distributed/weight_stream.h: a base
// larger than the card). Applied to a built model from outside, as sharding and checkpointing are. Not here: what a
// stream makes (generate/request.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/denoiser.h"
#include "train/loop/config_fields.h"

namespace vdt {

struct StreamSpeed {
  std::string fp8 = "off";           // off | on | fast: the blocks' base GEMMs in FP8 (distributed/fp8_blocks.h)
  std::string cuda_graphs = "auto";  // auto | on | off: each pass's block loop replayed (model/pass_graph.h)
  std::string merge_lora = "on";     // on | off: the LoRA folded into the base weights once (model/lora.h)
  int64_t stream_blocks = 0;         // blocks' frozen weights streamed from pinned host memory (weight_stream.h)
  static const std::vector<ConfigField<StreamSpeed>>& fields();
};
// Folds an attached LoRA into the base weights (--merge-lora on, before any FP8 quantization), routes the model's
// blocks through --fp8 (their frozen weights held quantized) and resolves --cuda-graphs for the model's device:
// returns whether streams record CUDA graphs (GenerationRequest::graphs). Errors name the flag and the fix. Call once
// per model, after its LoRA is loaded; the model is for sampling from then on (a merged LoRA is not undone).
// `device`: where the passes run, when the model was built elsewhere (the host: a base larger than the card with
// --stream-blocks, stream_speed_build_device); the model moves there, the streamed blocks' frozen weights staying in
// host memory.
bool apply_stream_speed(Denoiser& model, const StreamSpeed& speed, std::optional<torch::Device> device = std::nullopt);
// Where to build the model that `speed` is applied to on `device`: the host with --stream-blocks (the base may be
// larger than the card; apply_stream_speed moves the rest), else `device`.
torch::Device stream_speed_build_device(const StreamSpeed& speed, const torch::Device& device);

}  // namespace vdt
