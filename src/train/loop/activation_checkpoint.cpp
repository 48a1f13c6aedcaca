// The checkpoint is a torch::autograd::Function whose differentiable inputs are the block call's inputs (passed as a
// TensorList: LibTorch counts a std::vector argument as one non-variable); the call
// (its block and its run function, which holds everything else the block needs) and the options travel as opaque
// pointers: the call is copied to the heap in forward and freed after its recompute in backward. Blocks are
// deterministic (no dropout), so the recomputation needs no RNG state.
#include "train/loop/activation_checkpoint.h"

#include <torch/torch.h>

namespace vdt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x kept on the host: D2H on the current stream now, H2D on the current stream in backward (stream-ordered after it).
torch::Tensor to_host(const torch::Tensor& x) {
  if (!x.is_cuda()) return x;
  auto host = torch::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(true));
  host.copy_(x, /*non_blocking=*/true);
  return host;
}

class BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, const BlockCall* call,
                               const CheckpointOptions* opts) {
    const bool offload = opts->offload_inputs && inputs[0].is_cuda();
    variable_list saved = inputs.vec();
    if (offload) saved[0] = to_host(inputs[0]);
    ctx->save_for_backward(saved);
    c10::List<bool> needs;
    for (const auto& t : inputs) needs.push_back(t.requires_grad());
    ctx->saved_data["needs_grad"] = needs;
    ctx->saved_data["call"] = reinterpret_cast<int64_t>(new BlockCall(*call));
    ctx->saved_data["opts"] = reinterpret_cast<int64_t>(opts);
    if (opts->before) opts->before(call->block);
    auto y = call->run(inputs.vec());  // grad off: nothing kept
    if (opts->after) opts->after(call->block);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    std::unique_ptr<BlockCall> call(reinterpret_cast<BlockCall*>(ctx->saved_data["call"].toInt()));
    const auto* opts = reinterpret_cast<const CheckpointOptions*>(ctx->saved_data["opts"].toInt());
    const auto needs = ctx->saved_data["needs_grad"].toBoolList();
    if (grad_out[0].is_cuda() && !saved[0].is_cuda())  // offloaded: back to the block's device
      saved[0] = saved[0].to(grad_out[0].device(), /*non_blocking=*/true);
    variable_list in;
    for (size_t i = 0; i < saved.size(); ++i) in.push_back(saved[i].detach().requires_grad_(needs.get(i)));
    if (opts->before) opts->before(call->block);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);  // grad mode is off inside backward unless create_graph
      y = call->run(in);
    }
    torch::autograd::backward({y}, {grad_out[0]});
    if (opts->after) opts->after(call->block);
    variable_list grads;
    for (const auto& t : in) grads.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    grads.push_back(torch::Tensor());  // call
    grads.push_back(torch::Tensor());  // opts
    return grads;
  }
};

bool has_trainable(const torch::nn::Module& block) {
  for (const auto& p : block.parameters())
    if (p.requires_grad()) return true;
  return false;
}

}  // namespace

void enable_block_checkpointing(Denoiser& model, CheckpointOptions opts) {
  auto shared = std::make_shared<const CheckpointOptions>(std::move(opts));
  model.set_block_runner([shared](const BlockCall& call) {
    if (!torch::GradMode::is_enabled()) {
      if (shared->before) shared->before(call.block);
      auto y = call.run(call.inputs);
      if (shared->after) shared->after(call.block);
      return y;
    }
    bool needs_grad = false;
    for (const auto& t : call.inputs) needs_grad = needs_grad || t.requires_grad();
    if (!needs_grad && has_trainable(call.block)) {  // else no backward reaches us
      BlockCall leaf = call;
      leaf.inputs[0] = call.inputs[0].detach().requires_grad_(true);
      return BlockCheckpoint::apply(at::TensorList(leaf.inputs), &leaf, shared.get())[0];
    }
    return BlockCheckpoint::apply(at::TensorList(call.inputs), &call, shared.get())[0];
  });
}

}  // namespace vdt
