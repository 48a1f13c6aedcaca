// Flow-matching grids and the SFT objective. Grids are built with float32 torch ops in the reference's order so
// they match DiffSynth bit for bit (checked against tests/fixtures/flow_match_wan.safetensors and
// flow_match_h3.safetensors).
#include "diffusion/flow_match.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {
namespace {
FlowGrid shifted(torch::Tensor u, double shift) {
  auto sigmas = shift * u / (1 + (shift - 1) * u);
  return {sigmas, sigmas * 1000};
}
}  // namespace

const FlowSchedule& flow_schedule(const std::string& family) {
  static const FlowSchedule wan{"Wan", 5.0, 5.0, true};
  static const FlowSchedule h3{"MiniMax-H3", 2.22, 12.0, false};
  if (family == "wan") return wan;
  if (family == "h3") return h3;
  VDT_FAIL("no flow-matching schedule for the model family '", family, "' (known: wan, h3)");
}

FlowGrid training_grid(int64_t n, double shift) {
  return shifted(torch::linspace(1.0, 0.0, n + 1, torch::kFloat32).slice(0, 0, n), shift);
}

torch::Tensor training_weights(const FlowGrid& grid) {
  auto x = grid.timesteps;
  auto y = torch::exp(-2 * torch::pow((x - 500) / 1000, 2));
  auto y_shifted = y - y.min();
  auto w = y_shifted * (static_cast<double>(x.size(0)) / y_shifted.sum());
  if (x.size(0) != 1000) w = w * (static_cast<double>(x.size(0)) / 1000) + w[1];
  return w;
}

FlowGrid inference_grid(int64_t steps, double shift, double denoising_strength) {
  VDT_CHECK(steps > 0, "inference grid: steps must be positive, got ", steps);
  VDT_CHECK(denoising_strength > 0 && denoising_strength <= 1,
            "inference grid: denoising strength must be in (0, 1], got ", denoising_strength);
  return shifted(torch::linspace(denoising_strength, 0.0, steps + 1, torch::kFloat32).slice(0, 0, steps), shift);
}

torch::Tensor add_noise(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& sigma) {
  // The scalar second in each product: ATen's CPU kernels then take a 0-dim float32 sigma at float32 on
  // reduced-precision latents, as its CUDA kernels do in either position (the Python trainer's GPU arithmetic).
  return x0 * (1 - sigma) + noise * sigma;
}

torch::Tensor velocity_target(const torch::Tensor& x0, const torch::Tensor& noise) { return noise - x0; }

int64_t nearest_index(const FlowGrid& grid, double t) {
  return (grid.timesteps - t).abs().argmin().item<int64_t>();  // argmin returns the first minimum
}

double round_timestep(double t, torch::ScalarType dtype) {
  return torch::tensor(static_cast<float>(t)).to(dtype).item<double>();
}

SftExample make_sft_example(const torch::Tensor& x0, const torch::Tensor& noise, int64_t id, const FlowGrid& grid,
                            const torch::Tensor& weights, torch::ScalarType compute_dtype, bool first_frame_cond) {
  const int64_t n = grid.timesteps.size(0);
  VDT_CHECK(id >= 0 && id < n, "grid index ", id, " outside [0, ", n, ")");
  TORCH_CHECK(x0.dim() == 5 && noise.sizes() == x0.sizes(),
              "make_sft_example: x0 and noise must be [B, C, F, H, W], got ", x0.sizes(), " and ", noise.sizes());
  SftExample ex;
  // The seed: scheduler.add_noise and training_weight take the float32 grid timestep; only gc_forward gets
  // timestep.to(x0.dtype). (DiffSynth's own FlowMatchSFTLoss rounds first and looks sigma up from the rounded value;
  // the Python trainer does not, and vdt follows the Python trainer.)
  ex.timestep = grid.timesteps[id].item<double>();
  ex.sigma = grid.sigmas[id].item<double>();
  ex.weight = weights[id].item<double>();
  ex.model_timestep = round_timestep(ex.timestep, compute_dtype);
  // sigma stays a float32 scalar, as scheduler.add_noise's sigmas[id]: on bf16 latents each product is computed in
  // float32 and rounded once (rounding sigma to bf16 first would move the (1 - sigma) coefficient by up to 2e-3).
  const auto sigma = torch::tensor(static_cast<float>(ex.sigma), torch::kFloat32);  // 0-dim, on the host
  ex.x_t = add_noise(x0, noise, sigma);
  ex.x_t.select(2, 0).copy_(x0.select(2, 0));  // frame 0 is the clean conditioning latent, whatever first_frame_cond
  ex.target = velocity_target(x0, noise);
  const int64_t B = x0.size(0), F = x0.size(2);
  ex.t = torch::full({B, F}, ex.model_timestep, torch::kFloat32);  // on the host: model_inputs finds its rows there
  if (first_frame_cond) ex.t.select(1, 0).zero_();
  return ex;
}

torch::Tensor flow_mse(const torch::Tensor& pred, const torch::Tensor& target, bool skip_first_frame) {
  TORCH_CHECK(pred.sizes() == target.sizes() && pred.dim() == 5, "flow_mse: pred ", pred.sizes(), " vs target ",
              target.sizes());
  auto p = skip_first_frame ? pred.slice(2, 1) : pred;
  auto t = skip_first_frame ? target.slice(2, 1) : target;
  return (p.to(torch::kFloat32) - t.to(torch::kFloat32)).pow(2).mean();
}

}  // namespace vdt
