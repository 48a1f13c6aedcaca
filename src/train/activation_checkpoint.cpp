// The checkpoint is a torch::autograd::Function whose differentiable inputs are the block inputs x, e0 and ctx; the
// block itself is passed as an opaque pointer. Block parameters receive gradients through the inner backward call.
// Blocks are deterministic (no dropout), so the recomputation needs no RNG state.
#include "train/activation_checkpoint.h"

#include <torch/torch.h>

namespace vdt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
 public:
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor e0, torch::Tensor c,
                               torch::Tensor cos, torch::Tensor sin, WanBlockImpl* block, int64_t causal_chunk) {
    ctx->save_for_backward({x, e0, c, cos, sin});
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["causal_chunk"] = causal_chunk;
    return {block->forward({x, e0, c, {cos, sin}, causal_chunk})};  // runs with grad mode off: nothing inside is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto* block = reinterpret_cast<WanBlockImpl*>(ctx->saved_data["block"].toInt());
    std::vector<torch::Tensor> in;
    for (int i = 0; i < 3; ++i) in.push_back(saved[i].detach().requires_grad_(saved[i].requires_grad()));
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);  // grad mode is off inside backward unless create_graph
      y = block->forward({in[0], in[1], in[2], {saved[3], saved[4]}, ctx->saved_data["causal_chunk"].toInt()});
    }
    torch::autograd::backward({y}, {grad_out[0]});
    return {in[0].grad(), in[1].grad(), in[2].grad(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void enable_block_checkpointing(WanDiTImpl& model) {
  model.set_block_runner([](WanBlockImpl& block, const BlockInputs& in) {
    if (!torch::GradMode::is_enabled()) return block.forward(in);
    return BlockCheckpoint::apply(in.x, in.e0, in.ctx, in.rope.cos, in.rope.sin, &block, in.causal_chunk)[0];
  });
}

}  // namespace vdt
