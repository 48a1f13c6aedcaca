// Flow matching as DiffSynth's FlowMatchScheduler computes it: each base family's schedule (Wan: the "Wan" template,
// shift 5; MiniMax-H3: "MiniMax-H3", shift 2.22), the 1000-point training grid and its bell-shaped weights (mean 1),
// inference grids with shift and denoising strength, add_noise, the velocity target, and the SFT objective (one grid
// index per micro batch, frame 0 clean).
// Not here: where the index or noise come from (the trainer's random streams) or the sampler loop (euler).
#pragma once
#include <torch/types.h>

#include <string>

namespace vdt {

// The flow-matching schedule a base family trains and samples on: DiffSynth's scheduler template for that base
// (docs/h3.md). The training grid's shift (and so its bell weights) and the default sampling shift belong to the
// base; the causal trainer's --level-shift (the shift of diffusion forcing's per-chunk levels) is another thing.
struct FlowSchedule {
  const char* reference;      // DiffSynth's FlowMatchScheduler template: "Wan", "MiniMax-H3"
  double train_shift;         // set_timesteps(1000, training=True): Wan 5, MiniMax-H3 2.22
  double sample_shift;        // the default inference shift: Wan 5; MiniMax-H3 12 (its video schedule)
  bool round_model_timestep;  // Wan: the model's input timestep is rounded to the compute dtype (the Python SFT
                              // trainer's timestep.to(x0.dtype)); MiniMax-H3: kept float32 (DiffSynth's H3 loss)
};
// The schedule of a family ("wan", "h3"); anything else throws naming it.
const FlowSchedule& flow_schedule(const std::string& family);

struct FlowGrid {
  torch::Tensor sigmas;     // [N] float32, decreasing
  torch::Tensor timesteps;  // [N] float32, = 1000 * sigmas
};

// set_timesteps(N, training=True) for N = 1000 and the Wan template: u = linspace(1, 0, N+1)[:-1],
// sigma = shift*u / (1 + (shift-1)*u), t = 1000*sigma (float32 ops in the reference order).
FlowGrid training_grid(int64_t n = 1000, double shift = 5.0);
// Bell weight over a training grid: y = exp(-2((t-500)/1000)^2), minus its min, scaled to mean 1 ([N] float32).
torch::Tensor training_weights(const FlowGrid& grid);
// Inference grid of `steps` points starting at sigma = denoising_strength, shifted.
FlowGrid inference_grid(int64_t steps, double shift = 5.0, double denoising_strength = 1.0);

// x_t = (1 - sigma) x0 + sigma noise; sigma broadcastable to x0 (a 0-dim float32 sigma keeps its precision on bf16
// latents: each product is computed in float32 and rounded once, as the Python trainer on a GPU).
torch::Tensor add_noise(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& sigma);
// The flow-matching velocity target noise - x0.
torch::Tensor velocity_target(const torch::Tensor& x0, const torch::Tensor& noise);
// Index of the grid point nearest to t (first on ties): the Python trainer's timestep_id_for (validation timesteps).
int64_t nearest_index(const FlowGrid& grid, double t);

// One SFT training example (seed GcTrainModule.forward): the model input, its timesteps and the target.
struct SftExample {
  torch::Tensor x_t;     // [B, C, F, H, W] noisy latents; frame 0 is always the clean latent
  torch::Tensor t;       // [B, F] model timesteps: the grid value rounded to the compute dtype (frame 0 -> 0 under
                         // first-frame conditioning); on the host (model_inputs moves it, with its distinct rows)
  torch::Tensor target;  // [B, C, F, H, W] velocity target
  double sigma = 0, weight = 0;
  double timestep = 0;        // the exact float32 grid value (what the Python trainer logs)
  double model_timestep = 0;  // the value the model sees: timestep rounded to the compute dtype
};
// x0 and noise [B, C, F, H, W]; grid index id in [0, N). As the Python trainer (docs/design.md §1): sigma, the noise
// mixing and the weight come from the exact float32 grid point `id`; only the model's input timestep is rounded to
// `compute_dtype`. Frame 0 is always the clean latent and never scored (flow_mse skips it); `first_frame_cond` only
// decides frame 0's model timestep: 0 when on, the drawn t when off (the Python trainer's --no-first_frame_cond).
SftExample make_sft_example(const torch::Tensor& x0, const torch::Tensor& noise, int64_t id, const FlowGrid& grid,
                            const torch::Tensor& weights, torch::ScalarType compute_dtype, bool first_frame_cond);
// A timestep rounded to `dtype` (bf16 has spacing 4 in [512, 1024)), as the model receives it.
double round_timestep(double t, torch::ScalarType dtype);
// mean((pred - target)^2) in float32 over frames 1.. (every frame when !skip_first_frame), unweighted.
torch::Tensor flow_mse(const torch::Tensor& pred, const torch::Tensor& target, bool skip_first_frame);

}  // namespace vdt
