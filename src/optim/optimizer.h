// AdamW with parameter groups and explicit state dtype, as the trainers need it: a fused multi-tensor path (vdt's
// kernel, optim/adamw_cuda.h, for CUDA parameters it takes; else at::_fused_adamw_, the kernel behind PyTorch's
// AdamW(fused=True)) and a slow per-tensor reference path written from Loshchilov & Hutter's update, compared in tests.
// Plus gradient-norm clipping that reports the pre-clip norm as a tensor (no host sync). Not here: LR schedules
// (train/), master weights (master_weights.h), gradient synchronisation or sharding (distributed/grad_sync.h).
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace vdt {

struct AdamWGroup {
  std::string name;
  std::vector<torch::Tensor> params;
  double lr = 1e-5;
  double weight_decay = 0.01;
  std::vector<std::string> names;  // the parameters' checkpoint names (state files key by them); may be empty
};

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool fused = true;       // false: the reference path
  bool own_kernel = true;  // fused on CUDA: vdt's kernel where it takes the parameter; false: at::_fused_adamw_ only
  std::optional<torch::ScalarType> state_dtype;  // moments dtype; default: the parameter's dtype
};

class AdamW {
 public:
  AdamW(std::vector<AdamWGroup> groups, AdamWConfig cfg);
  // One update from each parameter's .grad (parameters without a gradient are skipped). When `found_inf` (a 0-dim
  // float tensor on the parameters' device) is non-zero the update is skipped on the device, without a host sync.
  // `grad_scale` (0-dim float32 on the device, optional) multiplies every gradient first: the clip coefficient,
  // applied inside the fused kernel rather than in a pass of its own over the gradients. What the gradients hold
  // afterwards is unspecified (vdt's kernel leaves them as they were, at::_fused_adamw_ stores them scaled).
  void step(const torch::Tensor& found_inf = {}, const torch::Tensor& grad_scale = {});
  void zero_grad();
  std::vector<AdamWGroup>& groups() { return groups_; }
  // Moments per parameter, in group order: exp_avg, exp_avg_sq.
  const std::vector<std::vector<torch::Tensor>>& exp_avg() const { return exp_avg_; }
  const std::vector<std::vector<torch::Tensor>>& exp_avg_sq() const { return exp_avg_sq_; }
  std::vector<std::vector<torch::Tensor>>& mutable_exp_avg() { return exp_avg_; }
  std::vector<std::vector<torch::Tensor>>& mutable_exp_avg_sq() { return exp_avg_sq_; }
  void set_steps_taken(int64_t s);
  // The training state by parameter name (groups need names): exp_avg.<name>, exp_avg_sq.<name>, step.<name> (the
  // 0-dim step count the fused kernel keeps per parameter). load_state() takes them back, checking shape and
  // converting dtype; a missing key is an error naming it and `where`.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void load_state(const std::function<torch::Tensor(const std::string&)>& get, const std::string& where);

 private:
  void step_reference(size_t g, const torch::Tensor& grad_scale);
  void step_fused(size_t g, const torch::Tensor& found_inf, const torch::Tensor& grad_scale);
  std::vector<AdamWGroup> groups_;
  AdamWConfig cfg_;
  std::vector<std::vector<torch::Tensor>> exp_avg_, exp_avg_sq_, step_tensors_;
  int64_t steps_ = 0;
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the pre-clip norm (0-dim float32 tensor on
// the gradients' device). max_norm <= 0 only measures. The trainers' update path (distributed/grad_sync.h) clips inside
// AdamW::step instead; this in-place form is the reference its tests compare with.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);
// The parts of it, for an update that applies the coefficient itself (AdamW::step's grad_scale): the global L2 norm
// of the parameters' gradients, and the clip coefficient min(1, max_norm / (norm + 1e-6)) (0-dim, on norm's device).
torch::Tensor grad_norm(const std::vector<torch::Tensor>& params);
torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm);
// 0-dim tensors that are consecutive elements of one buffer (ATen's CUDA _foreach_norm returns its norms so) as one
// [T] view of it, no copy; undefined otherwise (grad_norm then stacks them).
torch::Tensor consecutive_scalars(const std::vector<torch::Tensor>& scalars);

}  // namespace vdt
