// What a program asks the generation layer for (docs/generate.md): a stream's conditions — text rows, Picture 1, a
// first frame, or a data root's validation window — and how to make it: chunks, window, sink, steps (or a few-step
// student's step list), guidance, seed. generate_stream runs it through the rollout (generate/rollout.h) over a
// KV-cache stream, or over the recompute stream (the reference sampler). `vdt sample --causal`, `vdt bench sample`, the
// causal trainer's previews and `--val-sample-every` all come through here. Not here: files, flags, building the model
// (generate/generation_model.h), speed switches applied to it (tools/stream_speed.h).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "diffusion/euler.h"
#include "generate/rollout.h"
#include "model/attention.h"
#include "model/denoiser.h"

namespace vdt {

struct GenerationConditions {
  torch::Tensor text;               // [R, Lt, text_dim]: the text rows the stream may use
  std::vector<int64_t> frame_rows;  // the conditioned branch's row per latent frame (past its end: the last); empty: 0
  int64_t null_row = -1;            // the negative branch's row in every frame (guidance against it); -1: no guidance
  torch::Tensor text_tags;          // [R, Lt] int64: H3's tags of vision tokens inside the text; undefined: none
  // Conditioning images by name, clean latents [C, 1, Hp, Wp] (H3: "picture1", Picture 1), and their conditioning
  // noise [1, C, 1, Hp, Wp] (a name without one: drawn from the seed).
  std::map<std::string, torch::Tensor> cond, cond_noise;
  torch::Tensor first_frame;  // [C, 1, H, W]: latent frame 0 given clean (timestep 0); undefined: generated
};

struct GenerationRequest {
  GenerationConditions conditions;
  int64_t height = 0, width = 0;          // the latent grid
  int64_t chunk_frames = 3;               // latent frames per chunk (the LoRA's)
  int64_t span_chunks = 6;                // the trained span in chunks (the LoRA's)
  int64_t chunks = 6;                     // chunks to make; past the span needs a window
  int64_t window = -1, sink_chunks = -1;  // model/kv_stream.h StreamSpec
  EulerConfig euler;                      // steps, shift, guidance (cfg_scale)
  std::vector<double> timesteps;          // a few-step student's steps (0..1000); empty: euler's grid
  // A few-step student's sampler (generate/lora_file.h student_sampler "renoise", Self-Forcing's): each step's clean
  // prediction noised afresh to the next level, the draws from the seed; false: Euler steps.
  bool renoise = false;
  uint64_t seed = 0;                               // the noise (own conditions: per chunk; a window: the window's)
  bool side_streams = true;                        // the base's side streams (H3's audio) made with the video
  bool cache = true;                               // false: the recompute reference (no KV cache, no window)
  AttentionKernel kernel = AttentionKernel::sdpa;  // eager: the slow reference (tests)
  bool graphs = false;                             // CUDA graphs of the passes (tools/stream_speed.h)
  int64_t modulation_slots = 32;                   // H3's AdaLN projections cached per model time (0: none)
  // Throws naming the flag (--chunks, --steps, --cfg, ...) and the fix.
  void validate(const Denoiser& model) const;
};

struct StreamChunk {
  int64_t index = 0;
  torch::Tensor video;                        // [C, cf, H, W] float32 on the host
  std::map<std::string, torch::Tensor> side;  // H3: "audio" [2, Da, steps of the chunk]
  double seconds = 0;                         // wall time to make it (its steps; the commit not included)
};

struct StreamResult {
  std::string clip_id;  // a window's (empty for own conditions)
  int64_t start = 0;
  torch::Tensor ground_truth;  // [C, span, H, W] float32 (a window's; undefined for own conditions)
  torch::Tensor sample;        // [C, chunks * cf, H, W] float32
  std::map<std::string, torch::Tensor> side_ground_truth, side_sample;
  std::vector<double> chunk_seconds, commit_seconds;  // per chunk (the last chunk's commit is not run: 0)
  int64_t cache_bytes = 0;                            // every guidance branch's cache
  int64_t sink_chunks = 0, window = 0;                // as resolved by the base
  int64_t graph_replays = 0;                          // CUDA graph replays of every branch
};

// Hooks of a stream: on_chunk as each chunk is done (before the next starts); noise: chunk n's noise (video
// [1, C, cf, H, W] and the side streams' steps of chunk n; default: drawn from the request's seed); before_chunk(n):
// before chunk n's steps (a benchmark's trace).
struct StreamHooks {
  std::function<void(const StreamChunk&)> on_chunk;
  ChunkNoiseFn noise;
  std::function<void(int64_t n)> before_chunk;
};

StreamResult generate_stream(Denoiser& model, const GenerationRequest& request, const StreamHooks& hooks = {});

}  // namespace vdt
