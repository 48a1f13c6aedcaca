#include "train/replicated_grads.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

ReplicatedGrads::ReplicatedGrads(std::vector<torch::Tensor> params, Communicator& comm)
    : params_(std::move(params)), comm_(comm), sent_(params_.size(), false) {
  if (comm_.world() == 1) return;  // nothing to average
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    VDT_CHECK(acc != nullptr, "replicated gradients: parameter ", i, " does not require grad");
    hook_ids_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& out, const torch::autograd::variable_list&) {
          on_grad(i);
          return out;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

ReplicatedGrads::~ReplicatedGrads() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_ids_[i]);
}

void ReplicatedGrads::on_grad(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& g = params_[i].grad();
  if (!g.defined() || sent_[i]) return;
  sent_[i] = true;
  works_.push_back(comm_.all_reduce(g));
}

void ReplicatedGrads::finish() {
  if (comm_.world() == 1) return;
  torch::NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!sent_[i]) {  // no gradient here: join the collective with zeros
      if (!params_[i].grad().defined()) params_[i].mutable_grad() = torch::zeros_like(params_[i]);
      works_.push_back(comm_.all_reduce(params_[i].grad()));
    }
  for (auto& w : works_) w->wait();
  for (auto& p : params_) p.mutable_grad().div_(static_cast<double>(comm_.world()));
  works_.clear();
  sent_.assign(params_.size(), false);
}

}  // namespace vdt
