#include "distributed/grad_hooks.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"

namespace vdt {

GradHooks::GradHooks(std::vector<torch::Tensor> params, std::vector<std::vector<size_t>> slots,
                     std::function<void(size_t)> on_grad, std::function<void(size_t)> launch)
    : params_(std::move(params)),
      slots_(std::move(slots)),
      slot_of_(params_.size(), SIZE_MAX),
      ready_(slots_.size(), 0),
      seen_(params_.size(), false),
      on_grad_(std::move(on_grad)),
      launch_(std::move(launch)) {
  for (size_t k = 0; k < slots_.size(); ++k)
    for (size_t i : slots_[k]) {
      VDT_CHECK(i < params_.size() && slot_of_[i] == SIZE_MAX, "gradient hooks: parameter ", i,
                " is out of range or in two slots");
      slot_of_[i] = k;
    }
  for (size_t i = 0; i < params_.size(); ++i) {
    VDT_CHECK(slot_of_[i] != SIZE_MAX, "gradient hooks: parameter ", i, " is in no slot");
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    VDT_CHECK(acc != nullptr, "gradient hooks: parameter ", i, " (", params_[i].sizes(), ") does not require grad");
    hook_ids_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& out, const torch::autograd::variable_list&) {
          on_hook(i);
          return out;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

GradHooks::~GradHooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_ids_[i]);
}

std::vector<std::vector<size_t>> GradHooks::reverse_buckets(const std::vector<torch::Tensor>& params,
                                                            int64_t max_numel) {
  std::vector<std::vector<size_t>> out;
  int64_t numel = 0;
  for (size_t i = params.size(); i-- > 0;) {
    if (out.empty() || (numel > 0 && numel + params[i].numel() > max_numel)) out.emplace_back(), numel = 0;
    out.back().push_back(i);
    numel += params[i].numel();
  }
  return out;
}

void GradHooks::on_hook(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!params_[i].grad().defined()) return;
  VDT_CHECK(!seen_[i], "gradient hooks: a second gradient for parameter ", i, " (", params_[i].sizes(),
            ") in one backward; a module used twice per step cannot be synchronised as it completes");
  seen_[i] = true;
  on_grad_(i);
  ++ready_[slot_of_[i]];
  launch_ready();
}

void GradHooks::launch_ready() {
  while (next_ < slots_.size() && ready_[next_] == slots_[next_].size()) {
    order_.push_back(next_);
    launch_(next_++);
  }
}

void GradHooks::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  while (next_ < slots_.size()) {
    order_.push_back(next_);
    launch_(next_++);
  }
  last_order_ = std::move(order_);
  order_.clear();
  next_ = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(seen_.begin(), seen_.end(), false);
}

}  // namespace vdt
