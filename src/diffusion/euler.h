// Euler sampling over the Wan inference grid (docs/design.md §2) with two-branch classifier-free guidance and the TI2V
// first frame re-imposed after every step. The model is a callback, so this file knows no network.
// The causal model samples chunk by chunk (causal_euler_sample).
#pragma once
#include <torch/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace vdt {

struct EulerConfig {
  int64_t steps = 30;
  double shift = 5.0;
  double cfg_scale = 5.0;
  double denoising_strength = 1.0;
  bool first_frame_cond = true;
};

// x [B, C, F, H, W], t [B, F] (0..1000) -> velocity [B, C, F, H, W]
using VelocityFn = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t)>;

// noise [B, C, F, H, W]; first_frame [B, C, 1, H, W] (required when first_frame_cond). `negative` may be empty:
// then no guidance. v = neg + cfg (pos - neg); x <- x + v (sigma_{k+1} - sigma_k), sigma_N = 0.
torch::Tensor euler_sample(const VelocityFn& positive, const VelocityFn& negative, const torch::Tensor& noise,
                           const torch::Tensor& first_frame, const EulerConfig& cfg);

// What Euler integrates when a base denoises side streams beside the video (H3's audio): every stream moves by the
// same sigma step; a side stream's steps are on its last axis.
struct SampleState {
  torch::Tensor video;                        // [B, C, F, H, W]
  std::map<std::string, torch::Tensor> side;  // [B, ..., A]
};
// x, t [B, F] (0..1000, per video frame; a callback maps it onto its side streams' steps) -> the velocity of every
// stream of x.
using StateVelocityFn = std::function<SampleState(const SampleState& x, const torch::Tensor& t)>;
// A side stream's chunk bounds: chunk c owns steps [bounds[c], bounds[c + 1]) (Denoiser::side_stream_chunks).
using SideBounds = std::map<std::string, std::vector<int64_t>>;

// euler_sample on every stream of `noise` (first_frame applies to the video).
SampleState euler_sample(const StateVelocityFn& positive, const StateVelocityFn& negative, const SampleState& noise,
                         const torch::Tensor& first_frame, const EulerConfig& cfg);

// Chunk by chunk (docs/design.md §2, the causal workflow's previews): chunk k (frames [k cf, (k+1) cf)) is sampled by
// euler_sample while chunks 0..k-1, already sampled, ride along clean at timestep 0 as its block-causal prefix; the
// callbacks see x [B, C, (k+1) cf, H, W] and t [B, (k+1) cf] and their output's last cf frames are used. The prefix
// is recomputed at every step (no KV cache: previews, not serving). first_frame, when defined, is imposed on frame 0.
torch::Tensor causal_euler_sample(const VelocityFn& positive, const VelocityFn& negative, const torch::Tensor& noise,
                                  const torch::Tensor& first_frame, int64_t chunk_frames, const EulerConfig& cfg);
// The same with side streams: chunk k's steps of each side stream are sampled with its frames, and the callbacks see
// each side stream up to the end of chunk k (its bounds[k + 1] steps), the earlier steps clean.
SampleState causal_euler_sample(const StateVelocityFn& positive, const StateVelocityFn& negative,
                                const SampleState& noise, const SideBounds& bounds, const torch::Tensor& first_frame,
                                int64_t chunk_frames, const EulerConfig& cfg);

}  // namespace vdt
