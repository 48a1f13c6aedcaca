// Streaming Euler sampling (docs/causal.md "Generating with a trained LoRA"): chunk after chunk, each one sampled by
// euler_sample (the same grid, steps and guidance as causal_euler_sample, the recompute reference) with callbacks that
// attend to a KV cache instead of recomputing the finished chunks, then committed once to each guidance branch's
// cache and handed to `on_chunk` as soon as it is done. The model is a pair of callbacks per branch, so this file
// knows no network (model/kv_stream.h is what they usually call).
#pragma once
#include <functional>

#include "diffusion/euler.h"

namespace vdt {

// One guidance branch of a stream.
struct StreamBranch {
  // x: the chunk being made (video [B, C, cf, H, W], each side stream's steps of the chunk), t [B, cf] -> velocity
  StateVelocityFn velocity;
  // The finished chunk, clean, appended to the branch's cache (its last chunk needs none: commit_last false).
  std::function<void(const SampleState& clean)> commit;
};

struct StreamConfig {
  int64_t chunks = 1;
  bool commit_last = false;  // commit the last chunk too (a stream that continues later)
};

// Noise of chunk n (video [B, C, cf, H, W] and the side streams' steps of chunk n).
using ChunkNoiseFn = std::function<SampleState(int64_t n)>;
// Chunk n is done (the sampler's result for it); called before chunk n + 1 starts.
using ChunkDoneFn = std::function<void(int64_t n, const SampleState& chunk)>;

// first_frame [B, C, 1, H, W], when defined, is imposed on frame 0 of chunk 0 (timestep 0 there), as
// causal_euler_sample. `negative` may have no velocity: no guidance. Returns nothing: chunks go to on_chunk.
void stream_sample(const StreamBranch& positive, const StreamBranch& negative, const ChunkNoiseFn& noise,
                   const torch::Tensor& first_frame, const StreamConfig& stream, const EulerConfig& cfg,
                   const ChunkDoneFn& on_chunk);

}  // namespace vdt
