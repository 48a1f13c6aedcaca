// The parameters the optimizer updates, paired with the model's compute parameters (docs/design.md §4 precision):
//   mixed: compute weights in bf16, fp32 master copies owned here; micro-batch gradients are accumulated into
//          fp32 master gradients, the optimizer updates the masters, and publish() writes them back in bf16;
//   bf16 / fp32: the optimizer updates the model's own parameters (no copies).
// Not here: sharding the masters across ranks (distributed/zero2.h), the update itself (distributed/grad_sync.h).
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace vdt {

class TrainParams {
 public:
  TrainParams(std::vector<std::pair<std::string, torch::Tensor>> named, bool fp32_masters);
  // After a micro batch's backward: move the compute gradients into the master gradients (mixed only).
  void accumulate_grads();
  // After the optimizer step: copy masters into the compute weights (mixed only).
  void publish();
  // Pairs the masters with `compute` (same names, same order as at construction) after the model was cast.
  void rebind(const std::vector<std::pair<std::string, torch::Tensor>>& compute);
  // Drops the compute parameters' gradients (after the step).
  void clear_compute_grads();
  // Optimizer-side tensors (masters or the parameters themselves) whose name passes `keep`.
  std::vector<torch::Tensor> select(const std::function<bool(const std::string&)>& keep) const;
  std::vector<torch::Tensor> all() const;
  // Names of the tensors select(keep) returns, in the same order; named() pairs every optimizer-side tensor.
  std::vector<std::string> select_names(const std::function<bool(const std::string&)>& keep) const;
  std::vector<std::pair<std::string, torch::Tensor>> named() const;
  bool has_masters() const { return masters_; }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> model_;
  std::vector<torch::Tensor> optim_;
  bool masters_;
};

}  // namespace vdt
