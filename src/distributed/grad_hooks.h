// Gradient-ready hooks with a fixed launch order, the one mechanism behind every gradient synchronisation
// (distributed/grad_sync.h): a post-accumulate hook on each parameter's gradient accumulator calls `on_grad(param)`
// the moment backward has produced its gradient, and the parameters are grouped into slots (buckets) that are
// launched strictly in slot order — slot k only after slots 0..k-1 — as soon as all of its parameters are ready. So
// every rank issues the same collectives in the same order whatever order its autograd engine ran the hooks in
// (NCCL deadlocks or mixes buffers otherwise). flush() launches what is left in order (slots whose parameters got no
// gradient on this rank included) and re-arms the hooks for the next backward.
// Not here: what a launch sends (the callers: ZeRO-2 reduce-scatters a bucket, the replicated path all-reduces).
#pragma once
#include <torch/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace vdt {

class GradHooks {
 public:
  // slots[k]: indices into `params` of slot k; every parameter in exactly one slot. on_grad(i) runs in the hook of
  // parameter i (once per backward; a second gradient for it is an error); launch(k) runs in slot order.
  GradHooks(std::vector<torch::Tensor> params, std::vector<std::vector<size_t>> slots,
            std::function<void(size_t param)> on_grad, std::function<void(size_t slot)> launch);
  ~GradHooks();
  GradHooks(const GradHooks&) = delete;
  GradHooks& operator=(const GradHooks&) = delete;

  // Launches every slot not launched yet, in order, then re-arms for the next backward.
  void flush();
  // Slots in the order they were launched during the last backward + flush (tests).
  const std::vector<size_t>& launch_order() const { return last_order_; }

  // Parameter indices in reverse registration order, cut into slots of at most `max_numel` elements (a slot holds at
  // least one parameter): roughly the order in which backward produces them.
  static std::vector<std::vector<size_t>> reverse_buckets(const std::vector<torch::Tensor>& params, int64_t max_numel);

 private:
  void on_hook(size_t param);
  void launch_ready();
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<size_t>> slots_;
  std::vector<size_t> slot_of_;
  std::vector<size_t> ready_;  // per slot: parameters with a gradient in this backward
  std::vector<bool> seen_;     // per parameter
  std::function<void(size_t)> on_grad_, launch_;
  size_t next_ = 0;
  std::vector<size_t> order_, last_order_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_ids_;
  std::mutex mu_;  // hooks of different devices run on different autograd threads
};

}  // namespace vdt
