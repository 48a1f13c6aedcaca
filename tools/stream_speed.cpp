// The speed knobs of streaming: parsed, checked against the device, applied to the built model once.
#include "tools/stream_speed.h"

#include <cstdio>

#include "core/error.h"
#include "distributed/fp8_blocks.h"
#include "distributed/weight_stream.h"
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
      {"--stream-blocks",
       "blocks whose frozen weights stay in pinned host memory and are copied to the GPU ahead of each block call of "
       "every pass (a base larger than the card: it is built on the host; docs/planner.md); 0: none",
       &C::stream_blocks},
  };
  return f;
}

bool apply_stream_speed(Denoiser& model, const StreamSpeed& speed, std::optional<torch::Device> device) {
  const auto graphs = parse_graph_mode(speed.cuda_graphs, "--cuda-graphs");
  const auto fp8 = parse_fp8(speed.fp8, "--fp8");
  const auto where = device.value_or(model.device());
  VDT_CHECK(fp8 != Fp8Mode::emulate, "--fp8 emulate is for training checks; streaming takes --fp8 off, on or fast");
  check_fp8_device(fp8, where, "--fp8");
  const int64_t n = static_cast<int64_t>(model.block_modules().size());
  VDT_CHECK(speed.stream_blocks >= 0 && speed.stream_blocks <= n, "--stream-blocks ", speed.stream_blocks,
            ": expected 0 to the base's ", n, " blocks");
  VDT_CHECK(speed.stream_blocks == 0 || graphs != GraphMode::on,
            "--stream-blocks with --cuda-graphs on: a graph replays fixed weight addresses, and streamed weights "
            "arrive anew for each pass\n---> HINT: --cuda-graphs off (auto turns them off with --stream-blocks)");
  VDT_CHECK(speed.merge_lora == "on" || speed.merge_lora == "off", "--merge-lora '", speed.merge_lora,
            "': expected on (the LoRA folded into the base weights) or off (the factors run beside them)");
  if (speed.merge_lora == "on") merge_attached_lora(model);  // before FP8 holds the frozen weights quantized
  // the streamed blocks in generation's order: 0..N-1 for every pass
  if (speed.stream_blocks > 0) {
    WeightStreamOptions wo;
    wo.streamed = streamed_block_indices(n, speed.stream_blocks), wo.wraps = true;
    auto stream = std::make_shared<WeightStream>(model, where, wo);
    wrap_block_runner(model, stream);
    std::printf("[stream] %s\n", stream->describe().c_str());
  }
  if (where != model.device()) model.to(where);  // what the stream left
  if (fp8 != Fp8Mode::off)                       // streamed weights come anew for each pass: not held quantized
    enable_fp8_linears(model, fp8, fp8_block_indices(n), /*hold_frozen=*/speed.stream_blocks == 0);
  return speed.stream_blocks == 0 && graphs_wanted(graphs, where, "--cuda-graphs");
}

torch::Device stream_speed_build_device(const StreamSpeed& speed, const torch::Device& device) {
  return speed.stream_blocks > 0 ? torch::Device(torch::kCPU) : device;
}

}  // namespace vdt
