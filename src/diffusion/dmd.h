// Distribution matching distillation (Yin et al. 2024, DMD) as Self-Forcing trains a few-step causal student
// (docs/distill.md): the student's step list on the base's shifted grid, the DMD timestep, the student's loss whose
// gradient is exactly the DMD gradient over N, and the critic's flow-matching loss, all in x0 space (the networks'
// velocity predictions are turned into x0 predictions first). Not here: where the draws come from (the trainer's
// counter-based streams), the rollout or the networks.
#pragma once
#include <torch/types.h>

#include <vector>

namespace vdt {

// The student's timesteps (0..1000, decreasing): each of `steps` (on the unshifted 1000-step clock: 1000, 750, 500,
// 250) mapped onto the 1000-point grid shifted by `shift`, as Self-Forcing's warped denoising steps (shift 5 gives
// 1000, 937.5, 833.3, 625). Every step must be in (0, 1000] and the list strictly decreasing (errors name --steps).
std::vector<double> student_timesteps(const std::vector<int64_t>& steps, double shift);

// A DMD timestep from a uniform draw u in [0, 1): an integer point of the 1000-step clock (Self-Forcing's randint),
// shifted by `shift`, clamped to [1000 min_sigma, 1000 max_sigma] (its 20 .. 980).
double dmd_timestep(double u, double shift, double min_sigma = 0.02, double max_sigma = 0.98);

// The clean prediction of a velocity prediction v = noise - x0 at noise level sigma: x0 = x_t - sigma v.
torch::Tensor x0_from_velocity(const torch::Tensor& x_t, const torch::Tensor& v, double sigma);

// The guided teacher in vdt's guidance convention (as `vdt sample --cfg`): uncond + scale (cond - uncond); uncond
// undefined or scale 1: cond alone (no second pass needed). Self-Forcing writes cond + g (cond - uncond): its g = 3 is
// scale 4 here.
torch::Tensor guided(const torch::Tensor& cond, const torch::Tensor& uncond, double scale);

struct DmdLoss {
  torch::Tensor loss;       // 0.5 mean((x - stopgrad(x - grad))^2), float64: d loss / d x = grad / N exactly
  torch::Tensor grad;       // [B, ...] the DMD gradient (float64, finite), no graph
  torch::Tensor grad_norm;  // its L2 norm (a scalar on x's device: logged without a sync of its own)
};
// x: the student's output [B, ...] (with its graph); critic_x0, teacher_x0: the fake and real scores' clean
// predictions of the noised x (no graph). grad = (critic - teacher) / mean|x - teacher| per sample, non-finite
// entries set to 0 (Self-Forcing's nan_to_num), and the loss that hands x exactly grad / N.
DmdLoss dmd_loss(const torch::Tensor& x, const torch::Tensor& critic_x0, const torch::Tensor& teacher_x0);

// The critic's flow-matching loss on the student's output x (no graph) noised with `noise` at sigma to x_t: its clean
// prediction x0_pred gives the flow (x_t - x0_pred) / sigma, scored against noise - x, mean square in float32
// (Self-Forcing's flow loss; equal to flow_mse of the velocity it came from).
torch::Tensor critic_flow_loss(const torch::Tensor& x_t, const torch::Tensor& x0_pred, const torch::Tensor& x,
                               const torch::Tensor& noise, double sigma);

}  // namespace vdt
