// Master weights. Gradients are moved (added, then freed) after every micro batch so the bf16 gradient buffers
// never hold a sum: accumulation happens in fp32.
#include "optim/master_weights.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

TrainParams::TrainParams(std::vector<std::pair<std::string, torch::Tensor>> named, bool fp32_masters)
    : model_(std::move(named)), masters_(fp32_masters) {
  for (auto& [name, p] : model_) optim_.push_back(masters_ ? p.detach().to(torch::kFloat32).clone() : p);
}

void TrainParams::accumulate_grads() {
  if (!masters_) return;
  torch::NoGradGuard ng;
  for (size_t i = 0; i < model_.size(); ++i) {
    auto& p = model_[i].second;
    if (!p.grad().defined()) continue;
    auto& g = optim_[i].mutable_grad();
    if (g.defined())
      g.add_(p.grad());
    else
      g = p.grad().to(torch::kFloat32);
    p.mutable_grad() = torch::Tensor();
  }
}

void TrainParams::publish() {
  if (!masters_) return;
  torch::NoGradGuard ng;
  for (size_t i = 0; i < model_.size(); ++i) model_[i].second.copy_(optim_[i]);
}

void TrainParams::rebind(const std::vector<std::pair<std::string, torch::Tensor>>& compute) {
  VDT_CHECK(compute.size() == model_.size(), "master weights: ", compute.size(), " compute parameters for ",
            model_.size(), " masters");
  for (size_t i = 0; i < model_.size(); ++i) {
    VDT_CHECK(compute[i].first == model_[i].first, "master weights: compute parameter ", i, " is '", compute[i].first,
              "', expected '", model_[i].first, "'");
    model_[i].second = compute[i].second;
    if (!masters_) optim_[i] = compute[i].second;  // the optimizer updates the parameters themselves
  }
}

void TrainParams::clear_compute_grads() {
  for (auto& [name, p] : model_) p.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> TrainParams::select(const std::function<bool(const std::string&)>& keep) const {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < model_.size(); ++i)
    if (keep(model_[i].first)) out.push_back(optim_[i]);
  return out;
}

std::vector<torch::Tensor> TrainParams::all() const { return optim_; }

std::vector<std::string> TrainParams::select_names(const std::function<bool(const std::string&)>& keep) const {
  std::vector<std::string> out;
  for (const auto& [name, p] : model_)
    if (keep(name)) out.push_back(name);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> TrainParams::named() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < model_.size(); ++i) out.emplace_back(model_[i].first, optim_[i]);
  return out;
}

}  // namespace vdt
