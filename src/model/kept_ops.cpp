// Thread-local: a block's forward and its replay run on one thread (the replay inside the autograd engine's backward
// call), while other threads (data loaders, other ranks in tests) never see the policy or the linear implementation.
#include "model/kept_ops.h"

#include <torch/torch.h>

namespace vdt {
namespace {
thread_local KeptOps* current = nullptr;
thread_local LinearImpl* current_impl = nullptr;
}  // namespace

torch::Tensor input_act(const torch::Tensor& x, InputAct act) {
  return act == InputAct::gelu_tanh ? torch::gelu(x, "tanh") : x;
}

torch::Tensor base_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, InputAct act) {
  return current_impl ? current_impl->linear(x, w, b, act) : torch::linear(input_act(x, act), w, b);
}

LinearImpl* current_linear_impl() { return current_impl; }

torch::Tensor kept_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, GemmRole role,
                          InputAct act) {
  if (current) return current->linear(x, w, b, role, act);
  return role == GemmRole::base ? base_linear(x, w, b, act) : torch::linear(input_act(x, act), w, b);
}

torch::Tensor kept_attention(const std::vector<torch::Tensor>& inputs, const AttentionFn& fn) {
  return current ? current->attention(inputs, fn) : fn(inputs);
}

KeptOpsScope::KeptOpsScope(KeptOps* ops) : ThreadSlotScope(current, ops) {}
LinearImplScope::LinearImplScope(LinearImpl* impl) : ThreadSlotScope(current_impl, impl) {}

}  // namespace vdt
