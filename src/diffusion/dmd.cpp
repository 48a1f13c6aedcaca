// DMD's pieces in x0 space, transcribed from Self-Forcing's released DMD (model/dmd.py: _compute_kl_grad,
// compute_distribution_matching_loss, critic_loss; utils/loss.py's flow loss) and its warped denoising steps.
#include "diffusion/dmd.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "diffusion/flow_match.h"

namespace vdt {

std::vector<double> student_timesteps(const std::vector<int64_t>& steps, double shift) {
  VDT_CHECK(!steps.empty(), "--steps: the student's step list is empty; expected e.g. 1000,750,500,250");
  VDT_CHECK(shift > 0, "student steps: shift ", shift, " must be > 0");
  // Self-Forcing's warp: timesteps = cat(scheduler.timesteps, [0]) over the 1000-point shifted grid, and step s
  // becomes timesteps[1000 - s].
  const auto grid = training_grid(1000, shift).timesteps;  // [1000] decreasing, grid[0] = 1000
  std::vector<double> out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t s = steps[i];
    VDT_CHECK(s > 0 && s <= 1000, "--steps: step ", s, " is outside (0, 1000] (the unshifted 1000-step clock)");
    VDT_CHECK(i == 0 || s < steps[i - 1], "--steps: the list must decrease strictly, got ", steps[i - 1], " then ", s);
    out.push_back(grid[1000 - s].item<double>());
  }
  return out;
}

double dmd_timestep(double u, double shift, double min_sigma, double max_sigma) {
  VDT_CHECK(u >= 0 && u < 1, "dmd_timestep: u ", u, " outside [0, 1)");
  const double t = std::floor(u * 1000.0) / 1000.0;  // randint(0, 1000) / 1000
  const double shifted = 1000.0 * shift * t / (1.0 + (shift - 1.0) * t);
  return std::clamp(shifted, 1000.0 * min_sigma, 1000.0 * max_sigma);
}

torch::Tensor x0_from_velocity(const torch::Tensor& x_t, const torch::Tensor& v, double sigma) {
  TORCH_CHECK(x_t.sizes() == v.sizes(), "x0_from_velocity: x_t ", x_t.sizes(), " vs v ", v.sizes());
  return (x_t.to(torch::kFloat32) - sigma * v.to(torch::kFloat32)).to(v.scalar_type());
}

torch::Tensor guided(const torch::Tensor& cond, const torch::Tensor& uncond, double scale) {
  if (!uncond.defined() || scale == 1.0) return cond;
  TORCH_CHECK(cond.sizes() == uncond.sizes(), "guided: cond ", cond.sizes(), " vs uncond ", uncond.sizes());
  const auto c = cond.to(torch::kFloat32), u = uncond.to(torch::kFloat32);
  return (u + scale * (c - u)).to(cond.scalar_type());
}

DmdLoss dmd_loss(const torch::Tensor& x, const torch::Tensor& critic_x0, const torch::Tensor& teacher_x0) {
  TORCH_CHECK(x.dim() >= 2 && x.sizes() == critic_x0.sizes() && x.sizes() == teacher_x0.sizes(), "dmd_loss: x ",
              x.sizes(), ", critic ", critic_x0.sizes(), ", teacher ", teacher_x0.sizes(),
              " must be one shape [B, ...]");
  DmdLoss out;
  {
    torch::NoGradGuard ng;
    const auto xd = x.detach().to(torch::kFloat64);
    const auto real = teacher_x0.detach().to(torch::kFloat64), fake = critic_x0.detach().to(torch::kFloat64);
    std::vector<int64_t> dims;  // every axis but the batch: one normaliser per sample
    for (int64_t d = 1; d < x.dim(); ++d) dims.push_back(d);
    const auto normaliser = (xd - real).abs().mean(dims, /*keepdim=*/true);  // [B, 1, ...]
    auto grad = (fake - real) / normaliser;
    // Self-Forcing's nan_to_num would turn ±inf (x equal to the teacher's prediction) into the largest float: a
    // non-finite entry is dropped instead.
    out.grad = torch::where(torch::isfinite(grad), grad, torch::zeros_like(grad));
    out.grad_norm = out.grad.norm();
  }
  // 0.5 mean((x - target)^2) with target = x - grad held constant: its gradient is (x - target) / N = grad / N.
  const auto xd = x.to(torch::kFloat64);
  out.loss = 0.5 * (xd - (xd.detach() - out.grad)).pow(2).mean();
  return out;
}

torch::Tensor critic_flow_loss(const torch::Tensor& x_t, const torch::Tensor& x0_pred, const torch::Tensor& x,
                               const torch::Tensor& noise, double sigma) {
  TORCH_CHECK(sigma > 0, "critic_flow_loss: sigma ", sigma, " must be > 0 (the DMD timesteps are clamped above 0)");
  TORCH_CHECK(x_t.sizes() == x0_pred.sizes() && x.sizes() == x_t.sizes() && noise.sizes() == x.sizes(),
              "critic_flow_loss: x_t ", x_t.sizes(), ", x0_pred ", x0_pred.sizes(), ", x ", x.sizes(), ", noise ",
              noise.sizes(), " must be one shape");
  const auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
  const auto flow = (f(x_t) - f(x0_pred)) / sigma;
  return (flow - (f(noise) - f(x).detach())).pow(2).mean();
}

}  // namespace vdt
