// Streaming a causal model from a validation window (`vdt sample --causal --stream`, `vdt bench sample`, the causal
// trainer's `--val-sample-every`): the window's text, conditioning (H3: Picture 1) and first frame, generated chunk
// by chunk with a KV cache (model/kv_stream.h) by the rollout (generate/rollout.h), for as many
// chunks as asked. Within the window's span the noise is sample_causal_window's, so with the window at least the
// whole stream the result equals the recompute sampler's; chunks past the span draw their own noise and repeat the
// window's last text row.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/causal_dataset.h"
#include "diffusion/euler.h"
#include "model/attention.h"
#include "model/denoiser.h"
#include "train/loop/config_fields.h"

namespace vdt {

// The speed knobs of streaming generation, declared once for `vdt sample --stream` and `vdt bench sample`.
struct StreamSpeed {
  std::string fp8 = "off";           // off | on | fast: the blocks' base GEMMs in FP8 (distributed/fp8_blocks.h)
  std::string cuda_graphs = "auto";  // auto | on | off: each pass's block loop replayed (model/pass_graph.h)
  std::string merge_lora = "on";     // on | off: the LoRA folded into the base weights once (model/lora.h)
  static const std::vector<ConfigField<StreamSpeed>>& fields();
};
// Folds an attached LoRA into the base weights (--merge-lora on, before any FP8 quantization), routes the model's
// blocks through --fp8 (their frozen weights held quantized) and resolves --cuda-graphs for the model's device:
// returns whether streams record CUDA graphs. Errors name the flag and the fix. Call once per model, after its LoRA
// is loaded; the model is for sampling from then on (a merged LoRA is not undone).
bool apply_stream_speed(Denoiser& model, const StreamSpeed& speed);

struct StreamOptions {
  int64_t chunks = 0;        // 0: the window's span
  int64_t window = -1;       // finished chunks kept after the sink (-1: all)
  int64_t sink_chunks = -1;  // -1: the base's default (model/kv_stream.h)
  int64_t span_chunks = 6;   // the trained span in chunks (the LoRA's span_chunks)
  AttentionKernel kernel = AttentionKernel::sdpa;
  bool graphs = false;            // CUDA graphs of the passes (apply_stream_speed)
  int64_t modulation_slots = 32;  // H3's AdaLN projections cached per model time (0: every pass; model/kv_stream.h)
};

struct StreamChunk {
  int64_t index = 0;
  torch::Tensor video;                        // [C, cf, H, W] float32 on the host
  std::map<std::string, torch::Tensor> side;  // H3: "audio" [2, Da, steps of the chunk]
  double seconds = 0;                         // wall time to make it (its Euler steps; the commit not included)
};

struct StreamResult {
  std::string clip_id;
  int64_t start = 0;
  torch::Tensor ground_truth;  // [C, span, H, W] float32 (the window)
  torch::Tensor sample;        // [C, chunks * cf, H, W] float32
  std::map<std::string, torch::Tensor> side_ground_truth, side_sample;
  std::vector<double> chunk_seconds, commit_seconds;  // per chunk (the last chunk's commit is not run: 0)
  int64_t cache_bytes = 0;                            // every guidance branch's cache
  int64_t sink_chunks = 0, window = 0;                // as resolved by the base
};

// Val window `index` streamed. on_chunk(chunk) is called as each chunk is done, before the next one starts.
// `prompt`: when given, this prompt (a row of ds's text table) in every frame of the conditioned branch instead of the
// window's own text, as sample_causal_window takes it.
StreamResult stream_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                  const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                  const StreamOptions& opts,
                                  const std::function<void(const StreamChunk&)>& on_chunk = {},
                                  const std::string* prompt = nullptr);

}  // namespace vdt
