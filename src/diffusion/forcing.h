// Diffusion forcing for the causal workflow (docs/design.md §5 `df`, the Python trainer rtcwm): a span of `chunks`
// chunks of `chunk_frames` latent frames, each chunk with its own noise level u ~ U(0, 1) shifted by `level_shift`
// (sigma = s u / (1 + (s - 1) u), t = 1000 sigma), per-frame timesteps from the chunk, and a loss that is each chunk's
// MSE weighted by the bell weight of its t (the training grid's weight at the nearest grid point), averaged over
// chunks. The first latent frame of the span may be given clean (Picture-1 style): timestep 0, no loss. Not here: where
// u comes from (the caller's counter-based stream) or the attention pattern (model/block_causal.h).
#pragma once
#include <torch/types.h>

#include <vector>

#include "diffusion/flow_match.h"

namespace vdt {

struct ForcingConfig {
  int64_t chunks = 6, chunk_frames = 3;
  double level_shift = 3.0;
  bool clean_first_frame = false;
  bool round_timestep = true;  // the base's rule (flow_schedule): model timesteps rounded to x0's dtype, or float32
  void validate() const;       // names the flag at fault
};

// The shifted noise level of a uniform draw u in [0, 1).
double df_sigma(double u, double shift);

struct DfExample {
  torch::Tensor x_t;             // [B, C, F, H, W], F = chunks * chunk_frames; teacher forcing: [B, C, 2F, H, W]
  torch::Tensor t;               // [B, F] per-frame model timesteps (float32; rounded to x0's dtype, the compute
                                 // dtype, when the base's rule says so), on the host; teacher forcing: [B, 2F]
  torch::Tensor target;          // [B, C, F, H, W] velocity target
  std::vector<double> sigmas;    // per chunk
  std::vector<double> weights;   // per chunk: bell weight of the chunk's t
  bool teacher_forcing = false;  // x_t = [clean span | noisy span]; the prediction's second half is scored
  bool round_timestep = true;    // ForcingConfig's: a side stream's timesteps follow the same rule
};

// x0 and noise [B, C, F, H, W]; u: one uniform draw per chunk.
DfExample make_df_example(const torch::Tensor& x0, const torch::Tensor& noise, const std::vector<double>& u,
                          const ForcingConfig& cfg, const FlowGrid& grid, const torch::Tensor& grid_weights);

// Teacher forcing (docs/design.md §2 `tf`, docs/causal.md "Objectives"): the clean span (timestep 0) followed by the
// diffusion- forcing noisy span, one sequence of 2F frames for the teacher-forcing mask; the same levels, targets and
// weights.
DfExample make_tf_example(const torch::Tensor& x0, const torch::Tensor& noise, const std::vector<double>& u,
                          const ForcingConfig& cfg, const FlowGrid& grid, const torch::Tensor& grid_weights);

// A side stream denoised beside the video (H3's audio, steps on the last axis), noised with the video's chunk levels:
// chunk c owns steps [bounds[c], bounds[c + 1]) (Denoiser::side_stream_chunks).
struct DfStream {
  torch::Tensor x_t;            // [B, ..., A]; teacher forcing: [clean | noisy] along the steps, 2A
  torch::Tensor t;              // [B, A] per-step timesteps (0..1000); teacher forcing [B, 2A], clean half 0
  torch::Tensor target;         // [B, ..., A] velocity target
  std::vector<int64_t> bounds;  // chunks + 1
};
DfStream make_df_stream(const torch::Tensor& x0, const torch::Tensor& noise, const DfExample& ex,
                        const std::vector<int64_t>& bounds);
// A side stream's per-step timesteps [B, A] for per-frame timesteps t [B, F] (F a whole number of chunks of
// `chunk_frames`): chunk c's steps take its first frame's timestep (sampling; training gets them from make_df_stream).
torch::Tensor stream_timesteps(const torch::Tensor& t, const std::vector<int64_t>& bounds, int64_t chunk_frames);
// mean over chunks of weight_c * mean((pred - target)^2 over chunk c's steps), in float32: added to df_loss, this is
// DiffSynth's H3 loss w·MSE(video) + w·MSE(audio), per chunk.
torch::Tensor df_stream_loss(const torch::Tensor& pred, const DfStream& s, const DfExample& ex);

// mean over chunks of weight_c * mean((pred - target)^2 over chunk c's frames) in float32; a clean first frame is
// left out of chunk 0.
// `pred` is the model output for ex.x_t (its noisy half is scored under teacher forcing).
torch::Tensor df_loss(const torch::Tensor& pred, const DfExample& ex, const ForcingConfig& cfg);

}  // namespace vdt
