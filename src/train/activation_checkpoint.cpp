// The checkpoint is a torch::autograd::Function whose differentiable inputs are the block inputs x, e0 and ctx; the
// block and the options are passed as opaque pointers. Block parameters receive gradients through the inner backward
// call. Blocks are deterministic (no dropout), so the recomputation needs no RNG state.
#include "train/activation_checkpoint.h"

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
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor e0, torch::Tensor c,
                               torch::Tensor cos, torch::Tensor sin, torch::Tensor ctx_ids, WanBlockImpl* block,
                               const CheckpointOptions* opts, int64_t causal_chunk, bool teacher_forcing) {
    const bool offload = opts->offload_inputs && x.is_cuda();
    ctx->save_for_backward({offload ? to_host(x) : x, e0, c, cos, sin, ctx_ids});
    if (ctx_ids.numel() == 0) ctx_ids = torch::Tensor();  // the runner's stand-in for "none"
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["opts"] = reinterpret_cast<int64_t>(opts);
    ctx->saved_data["causal_chunk"] = causal_chunk;
    ctx->saved_data["teacher_forcing"] = teacher_forcing;
    ctx->saved_data["x_requires_grad"] = x.requires_grad();
    if (opts->before) opts->before(*block);
    auto y = block->forward({x, e0, c, {cos, sin}, causal_chunk, teacher_forcing, ctx_ids});  // grad off: nothing kept
    if (opts->after) opts->after(*block);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto* block = reinterpret_cast<WanBlockImpl*>(ctx->saved_data["block"].toInt());
    const auto* opts = reinterpret_cast<const CheckpointOptions*>(ctx->saved_data["opts"].toInt());
    auto x = saved[0];
    if (grad_out[0].is_cuda() && !x.is_cuda())  // offloaded: back to the block's device
      x = x.to(grad_out[0].device(), /*non_blocking=*/true);
    std::vector<torch::Tensor> in{x.detach().requires_grad_(ctx->saved_data["x_requires_grad"].toBool()),
                                  saved[1].detach().requires_grad_(saved[1].requires_grad()),
                                  saved[2].detach().requires_grad_(saved[2].requires_grad())};
    if (opts->before) opts->before(*block);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);  // grad mode is off inside backward unless create_graph
      y = block->forward({in[0], in[1], in[2], {saved[3], saved[4]}, ctx->saved_data["causal_chunk"].toInt(),
                          ctx->saved_data["teacher_forcing"].toBool(),
                          saved[5].numel() > 0 ? saved[5] : torch::Tensor()});
    }
    torch::autograd::backward({y}, {grad_out[0]});
    if (opts->after) opts->after(*block);
    return {in[0].grad(), in[1].grad(), in[2].grad(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(),  torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool has_trainable(WanBlockImpl& block) {
  for (const auto& p : block.parameters())
    if (p.requires_grad()) return true;
  return false;
}

}  // namespace

void enable_block_checkpointing(WanDiTImpl& model, CheckpointOptions opts) {
  auto shared = std::make_shared<const CheckpointOptions>(std::move(opts));
  model.set_block_runner([shared](WanBlockImpl& block, const BlockInputs& in) {
    if (!torch::GradMode::is_enabled()) {
      if (shared->before) shared->before(block);
      auto y = block.forward(in);
      if (shared->after) shared->after(block);
      return y;
    }
    auto x = in.x;
    const bool needs_grad = x.requires_grad() || in.e0.requires_grad() || in.ctx.requires_grad();
    if (!needs_grad && has_trainable(block)) x = x.detach().requires_grad_(true);  // else no backward reaches us
    // apply() takes defined tensors only: an empty one stands for "no ctx_ids"
    const auto ids = in.ctx_ids.defined() ? in.ctx_ids : torch::empty({0}, torch::dtype(torch::kLong));
    return BlockCheckpoint::apply(x, in.e0, in.ctx, in.rope.cos, in.rope.sin, ids, &block, shared.get(),
                                  in.causal_chunk, in.teacher_forcing)[0];
  });
}

}  // namespace vdt
