// Generating from a data root's validation window (`vdt sample --causal [--stream]`, the causal trainer's preview and
// `--val-sample-every`): the window's text (or a new prompt in every frame), the null prompt for guidance, its
// conditioning (H3: Picture 1) and first frame, and its own noise draws, as a GenerationRequest (generate/request.h).
// Within the span the draws are the same for the KV-cache stream and the recompute sampler, so the two agree when the
// window holds the whole stream; chunks past the span draw their own noise and repeat the window's last text row.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "data/causal_dataset.h"
#include "generate/request.h"

namespace vdt {

// A window as a request (knobs at their defaults: the caller sets chunks, steps, guidance ...), its draws as
// hooks.noise, and what the result reports about the window.
struct WindowRequest {
  GenerationRequest request;
  StreamHooks hooks;
  std::string clip_id;
  int64_t start = 0;
  torch::Tensor ground_truth;                              // [C, span, H, W] float32
  std::map<std::string, torch::Tensor> side_ground_truth;  // H3: "audio" [2, Da, A] float32
};
// Val window `index` of `ds` in chunks of `chunk_frames`, noise from (seed, clip, start), frame 0 given clean when
// `clean_first_frame`. `prompt`: when given, this prompt (a row of ds's text table) in every frame of the conditioned
// branch instead of the window's own text.
WindowRequest window_request(const Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                             uint64_t seed, bool clean_first_frame, const std::string* prompt = nullptr);
// The window streamed as w.request says (chunks 0: the window's span); the result carries its clip, start and ground
// truth. on_chunk as generate_stream's.
StreamResult generate_window(Denoiser& model, WindowRequest w,
                             const std::function<void(const StreamChunk&)>& on_chunk = {});

// The knobs of streaming a window, as `vdt sample --causal --stream` gives them.
struct StreamOptions {
  int64_t chunks = 0;        // 0: the window's span
  int64_t window = -1;       // finished chunks kept after the sink (-1: all)
  int64_t sink_chunks = -1;  // -1: the base's default (model/kv_stream.h)
  int64_t span_chunks = 6;   // the trained span in chunks (the LoRA's span_chunks)
  AttentionKernel kernel = AttentionKernel::sdpa;
  bool graphs = false;            // CUDA graphs of the passes (tools/stream_speed.h)
  int64_t modulation_slots = 32;  // H3's AdaLN projections cached per model time (0: every pass; model/kv_stream.h)
};
// Val window `index` streamed with a KV cache (Euler over cfg's grid, guidance against the null prompt).
StreamResult stream_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                  const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                  const StreamOptions& opts,
                                  const std::function<void(const StreamChunk&)>& on_chunk = {},
                                  const std::string* prompt = nullptr);
// The recompute sampler: val window `index` over its span chunk by chunk without a cache, every finished chunk
// recomputed clean beside the one being made (generate/recompute_stream.h), the family's side streams (H3's audio)
// made with their chunks.
StreamResult sample_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                  const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                  const std::string* prompt = nullptr);

}  // namespace vdt
