// Thread-local: a block's forward and its replay run on one thread (the replay inside the autograd engine's backward
// call), while other threads (data loaders, other ranks in tests) never see the policy.
#include "model/kept_ops.h"

#include <torch/torch.h>

namespace vdt {
namespace {
thread_local KeptOps* current = nullptr;
}  // namespace

torch::Tensor kept_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return current ? current->linear(x, w, b) : torch::linear(x, w, b);
}

torch::Tensor kept_attention(const std::vector<torch::Tensor>& inputs, const AttentionFn& fn) {
  return current ? current->attention(inputs, fn) : fn(inputs);
}

KeptOpsScope::KeptOpsScope(KeptOps* ops) : prev_(current) { current = ops; }
KeptOpsScope::~KeptOpsScope() { current = prev_; }

}  // namespace vdt
