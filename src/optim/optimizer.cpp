// AdamW. The reference path is the textbook update with decoupled weight decay and bias correction:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// The fused path runs vdt's kernel (adamw_cuda.h) for the parameters it takes on a CUDA device, and at::_fused_adamw_
// for the rest (and everywhere with own_kernel off); both take float32 step tensors incremented by the caller.
#include "optim/optimizer.h"

#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_fused_adamw.h>
#include <torch/torch.h>

#include "core/error.h"
#include "optim/adamw_cuda.h"  // declarations only; the kernel exists when VDT_WITH_CUDA_KERNELS is defined

namespace vdt {
namespace {

bool own_kernel_takes(const torch::Tensor& p, const torch::Tensor& grad, const torch::Tensor& exp_avg) {
#ifdef VDT_WITH_CUDA_KERNELS
  return optim_cuda::adamw_takes(p, grad, exp_avg);
#else
  return false;
#endif
}

// One update's tensor lists: parameters, gradients, moments, step counts.
struct Lists {
  std::vector<torch::Tensor> p, g, m, v, s;
  void add(const torch::Tensor& param, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
           const torch::Tensor& step) {
    p.push_back(param), g.push_back(param.grad()), m.push_back(exp_avg), v.push_back(exp_avg_sq), s.push_back(step);
  }
};

void own_kernel_step(const Lists& l, const optim_cuda::AdamWHyper& h, const torch::Tensor& found_inf,
                     const torch::Tensor& grad_scale) {
#ifdef VDT_WITH_CUDA_KERNELS
  optim_cuda::adamw_step(l.p, l.g, l.m, l.v, l.s, h, found_inf, grad_scale);
#else
  VDT_CHECK(false, "vdt was built without its CUDA kernels");
#endif
}

}  // namespace

AdamW::AdamW(std::vector<AdamWGroup> groups, AdamWConfig cfg) : groups_(std::move(groups)), cfg_(cfg) {
  for (const auto& g : groups_) {
    std::vector<torch::Tensor> m, v, s;
    for (const auto& p : g.params) {
      const auto dt = cfg_.state_dtype.value_or(p.scalar_type());
      m.push_back(torch::zeros_like(p, p.options().dtype(dt)));
      v.push_back(torch::zeros_like(p, p.options().dtype(dt)));
      s.push_back(torch::zeros({}, p.options().dtype(torch::kFloat32)));
    }
    exp_avg_.push_back(std::move(m));
    exp_avg_sq_.push_back(std::move(v));
    step_tensors_.push_back(std::move(s));
  }
}

void AdamW::set_steps_taken(int64_t s) {
  steps_ = s;
  for (auto& g : step_tensors_)
    for (auto& t : g) t.fill_(static_cast<double>(s));
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    VDT_CHECK(groups_[g].names.size() == groups_[g].params.size(), "AdamW group '", groups_[g].name,
              "' has no parameter names; its state cannot be saved");
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& n = groups_[g].names[i];
      out.emplace_back("exp_avg." + n, exp_avg_[g][i]);
      out.emplace_back("exp_avg_sq." + n, exp_avg_sq_[g][i]);
      out.emplace_back("step." + n, step_tensors_[g][i]);
    }
  }
  return out;
}

void AdamW::load_state(const std::function<torch::Tensor(const std::string&)>& get, const std::string& where) {
  torch::NoGradGuard ng;
  int64_t steps = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    VDT_CHECK(groups_[g].names.size() == groups_[g].params.size(), "AdamW group '", groups_[g].name,
              "' has no parameter names; its state cannot be loaded");
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& n = groups_[g].names[i];
      for (auto [key, dst] : {std::pair{"exp_avg." + n, exp_avg_[g][i]},
                              {"exp_avg_sq." + n, exp_avg_sq_[g][i]},
                              {"step." + n, step_tensors_[g][i]}}) {
        const auto src = get(key);
        VDT_CHECK(src.defined(), where, ": optimizer state '", key, "' is missing");
        VDT_CHECK(src.numel() == dst.numel(), where, ": optimizer state '", key, "' has ", src.numel(),
                  " elements, the model's parameter needs ", dst.numel(), " (", dst.sizes(), ")");
        dst.copy_(src.reshape(dst.sizes()));
      }
      steps = std::max<int64_t>(steps, static_cast<int64_t>(step_tensors_[g][i].item<double>()));
    }
  }
  steps_ = steps;
}

void AdamW::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.mutable_grad() = torch::Tensor();
}

void AdamW::step(const torch::Tensor& found_inf, const torch::Tensor& grad_scale) {
  torch::NoGradGuard ng;
  // The reference path checks on the host; the fused kernel skips on the device.
  if (!cfg_.fused && found_inf.defined() && found_inf.item<double>() != 0) return;
  ++steps_;
  for (size_t g = 0; g < groups_.size(); ++g)
    cfg_.fused ? step_fused(g, found_inf, grad_scale) : step_reference(g, grad_scale);
}

void AdamW::step_reference(size_t gi, const torch::Tensor& grad_scale) {
  const auto& g = groups_[gi];
  const double bc1 = 1 - std::pow(cfg_.beta1, static_cast<double>(steps_));
  const double bc2 = 1 - std::pow(cfg_.beta2, static_cast<double>(steps_));
  for (size_t i = 0; i < g.params.size(); ++i) {
    auto p = g.params[i];
    if (!p.grad().defined()) continue;
    step_tensors_[gi][i].fill_(static_cast<double>(steps_));
    auto grad = p.grad().to(torch::kFloat32);
    if (grad_scale.defined()) grad = grad * grad_scale.to(grad.device(), torch::kFloat32);
    auto m = exp_avg_[gi][i].to(torch::kFloat32), v = exp_avg_sq_[gi][i].to(torch::kFloat32);
    auto pf = p.to(torch::kFloat32) * (1 - g.lr * g.weight_decay);
    m = m * cfg_.beta1 + grad * (1 - cfg_.beta1);
    v = v * cfg_.beta2 + grad * grad * (1 - cfg_.beta2);
    pf = pf - (g.lr / bc1) * m / (v.sqrt() / std::sqrt(bc2) + cfg_.eps);
    p.copy_(pf);
    exp_avg_[gi][i].copy_(m);
    exp_avg_sq_[gi][i].copy_(v);
  }
}

void AdamW::step_fused(size_t gi, const torch::Tensor& found_inf, const torch::Tensor& grad_scale) {
  const auto& g = groups_[gi];
  // _fused_adamw_ wants every list on one device and dtype family: bucket by (device, param dtype, state dtype).
  std::map<std::tuple<std::string, int, int>, std::vector<size_t>> buckets;
  for (size_t i = 0; i < g.params.size(); ++i) {
    if (!g.params[i].grad().defined()) continue;
    buckets[{g.params[i].device().str(), static_cast<int>(g.params[i].scalar_type()),
             static_cast<int>(exp_avg_[gi][i].scalar_type())}]
        .push_back(i);
  }
  for (const auto& [key, idx] : buckets) {
    const auto device = g.params[idx.front()].device();
    std::optional<torch::Tensor> inf, scale;
    if (grad_scale.defined()) scale = grad_scale.to(device, torch::kFloat32);
    if (found_inf.defined()) inf = found_inf.to(device, torch::kFloat32);
    // A skipped step does not count (the kernels leave the step tensors alone).
    std::vector<torch::Tensor> all_steps;
    for (auto i : idx) all_steps.push_back(step_tensors_[gi][i]);
    inf ? at::_foreach_add_(all_steps, 1.0 - *inf) : at::_foreach_add_(all_steps, 1.0);
    Lists aten, own;  // for at::_fused_adamw_, for vdt's kernel
    for (auto i : idx) {
      const auto& p = g.params[i];
      const bool mine = cfg_.own_kernel && own_kernel_takes(p, p.grad(), exp_avg_[gi][i]);
      (mine ? own : aten).add(p, exp_avg_[gi][i], exp_avg_sq_[gi][i], step_tensors_[gi][i]);
    }
    if (!own.p.empty())
      own_kernel_step(own, {g.lr, cfg_.beta1, cfg_.beta2, g.weight_decay, cfg_.eps}, inf.value_or(torch::Tensor()),
                      scale.value_or(torch::Tensor()));
    if (aten.p.empty()) continue;
    // at::_fused_adamw_ divides the gradients by its grad_scale (AMP's unscale): hand it 1 / ours.
    std::optional<torch::Tensor> divisor;
    if (scale) divisor = 1.0 / *scale;
    at::_fused_adamw_(aten.p, aten.g, aten.m, aten.v, {}, aten.s, g.lr, cfg_.beta1, cfg_.beta2, g.weight_decay,
                      cfg_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, divisor, inf);
  }
}

namespace {
std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  VDT_CHECK(!grads.empty(), "clip_grad_norm: no parameter has a gradient");
  return grads;
}
}  // namespace

torch::Tensor consecutive_scalars(const std::vector<torch::Tensor>& norms) {
  if (norms.empty()) return {};
  const auto& first = norms.front();
  const int64_t n = static_cast<int64_t>(norms.size()), offset = first.storage_offset();
  for (int64_t i = 0; i < n; ++i) {
    const auto& t = norms[i];
    if (t.dim() != 0 || t.scalar_type() != first.scalar_type() || !t.storage().is_alias_of(first.storage()) ||
        t.storage_offset() != offset + i)
      return {};
  }
  if (static_cast<int64_t>(first.storage().nbytes()) < (offset + n) * first.element_size()) return {};
  return first.as_strided({n}, {1}, offset);
}

torch::Tensor grad_norm(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard ng;
  // Per-tensor norms in float32 (a bf16 gradient's norm is not rounded to bf16 on the way), then the total: one kernel
  // on their common buffer, where stacking ~800 scalars cost milliseconds of host time at the end of a 5B step while
  // the GPU waited.
  const auto norms = at::_foreach_norm(grads_of(params), 2, torch::kFloat32);
  if (const auto all = consecutive_scalars(norms); all.defined()) return all.norm();
  return torch::stack(norms).norm();
}

torch::Tensor clip_coefficient(const torch::Tensor& norm, double max_norm) {
  return torch::clamp(max_norm / (norm + 1e-6), c10::nullopt, 1.0);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard ng;
  auto total = grad_norm(params);
  if (max_norm > 0) {
    const auto coef = clip_coefficient(total, max_norm);
    for (auto& gr : grads_of(params)) gr.mul_(coef.to(gr.scalar_type()));
  }
  return total;
}

}  // namespace vdt
