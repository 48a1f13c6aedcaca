// The blocks' GEMM and attention calls, marked: an activation-checkpointing policy installed from outside
// (train/loop/activation_checkpoint, `--checkpointing selective`) keeps their outputs and recomputes only the
// elementwise work between them (norms, modulation, RoPE, gates, activations) in backward. With nothing installed (the
// default) kept_linear is torch::linear and kept_attention calls its function: the model carries no training state.
// Not here: what is kept or how it is replayed (that is the policy's business).
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

namespace vdt {

// A pure function of its inputs (no parameters: a policy may differentiate it with respect to its inputs only).
using AttentionFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

class KeptOps {
 public:
  virtual ~KeptOps() = default;
  // x [..., in], w [out, in], b [out] or undefined -> [..., out]
  virtual torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) = 0;
  // inputs (q, k, v, ...) -> fn(inputs)
  virtual torch::Tensor attention(const std::vector<torch::Tensor>& inputs, const AttentionFn& fn) = 0;
};

// What the model calls: torch::linear / fn(inputs) unless a KeptOps is installed on this thread.
torch::Tensor kept_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {});
torch::Tensor kept_attention(const std::vector<torch::Tensor>& inputs, const AttentionFn& fn);

// Installs `ops` (nullptr: none) on this thread for the scope's life; the previous one comes back after.
class KeptOpsScope {
 public:
  explicit KeptOpsScope(KeptOps* ops);
  ~KeptOpsScope();
  KeptOpsScope(const KeptOpsScope&) = delete;
  KeptOpsScope& operator=(const KeptOpsScope&) = delete;

 private:
  KeptOps* prev_;
};

}  // namespace vdt
