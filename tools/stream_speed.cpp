// The speed knobs of streaming: parsed, checked against the device, applied to the built model once.
#include "tools/stream_speed.h"

#include "core/error.h"
#include "distributed/fp8_blocks.h"
#include "model/lora.h"
#include "model/pass_graph.h"

namespace vdt {

const std::vector<ConfigField<StreamSpeed>>& StreamSpeed::fields() {
  using C = StreamSpeed;
  static const std::vector<ConfigField<C>> f = {
      {"--fp8",
       "FP8 GEMMs in the blocks (all but the first and last; their weights held quantized): off, on, or fast "
       "(fast accumulation); a GPU of compute capability 8.9+",
       &C::fp8},
      {"--cuda-graphs",
       "each pass's block loop recorded once and replayed as a CUDA graph: auto (on for a CUDA "
       "device), on, off",
       &C::cuda_graphs},
      {"--merge-lora",
       "the LoRA folded into the base weights once before the stream (W + scale B A, rounded to the "
       "weights' dtype; no factor GEMMs in the passes): on, or off (the factors run beside the base)",
       &C::merge_lora},
  };
  return f;
}

bool apply_stream_speed(Denoiser& model, const StreamSpeed& speed) {
  const auto graphs = parse_graph_mode(speed.cuda_graphs, "--cuda-graphs");
  const auto fp8 = parse_fp8(speed.fp8, "--fp8");
  VDT_CHECK(fp8 != Fp8Mode::emulate, "--fp8 emulate is for training checks; streaming takes --fp8 off, on or fast");
  check_fp8_device(fp8, model.device(), "--fp8");
  VDT_CHECK(speed.merge_lora == "on" || speed.merge_lora == "off", "--merge-lora '", speed.merge_lora,
            "': expected on (the LoRA folded into the base weights) or off (the factors run beside them)");
  if (speed.merge_lora == "on") merge_attached_lora(model);  // before FP8 holds the frozen weights quantized
  if (fp8 != Fp8Mode::off)
    enable_fp8_linears(model, fp8, fp8_block_indices(static_cast<int64_t>(model.block_modules().size())),
                       /*hold_frozen=*/true);
  return graphs_wanted(graphs, model.device(), "--cuda-graphs");
}

}  // namespace vdt
