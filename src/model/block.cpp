// Wan block. Order of the six modulation chunks: shift, scale, gate (attention), shift, scale, gate (FFN); the
// learned `modulation` is added to e0 before chunking, exactly as the reference.
#include "model/block.h"

#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#include "model/lora.h"

namespace vdt {

torch::Tensor modulated_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                             double eps) {
  return kernels::modulated_norm(x, shift, scale, eps);  // fused (model/kernels), or the reference with the switch off
}

torch::Tensor gated_add(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate) {
  return kernels::gated_add(x, y, gate);
}

WanBlockImpl::WanBlockImpl(int64_t dim, int64_t ffn_dim, int64_t num_heads, double eps) : eps_(eps) {
  self_attn = register_module("self_attn", SelfAttention(dim, num_heads, eps));
  cross_attn = register_module("cross_attn", CrossAttention(dim, num_heads, eps));
  norm3 = register_module("norm3", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps)));
  ffn = register_module("ffn", torch::nn::Sequential(torch::nn::Linear(dim, ffn_dim),
                                                     torch::nn::GELU(torch::nn::GELUOptions().approximate("tanh")),
                                                     torch::nn::Linear(ffn_dim, dim)));
  modulation = register_parameter("modulation", torch::randn({1, 6, dim}) / std::sqrt(static_cast<double>(dim)));
}

void WanBlockImpl::set_attention_kernel(AttentionKernel k) {
  self_attn->kernel = k;
  cross_attn->kernel = k;
}

torch::Tensor WanBlockImpl::forward(const BlockInputs& in) {
  TORCH_CHECK(in.x.dim() == 3 && in.e0.dim() == 4 && in.e0.size(2) == 6 && in.x.size(1) % in.e0.size(1) == 0,
              "WanBlock: expected x [B, L, D] and e0 [B, G, 6, D] with G dividing L, got ", in.x.sizes(), " and ",
              in.e0.sizes());
  auto mod = (modulation.to(in.e0.scalar_type()) + in.e0).chunk(6, 2);  // 6 x [B, G, 1, D], float32
  // 1) self-attention with adaLN (the norm hands x on to the residual add: one node takes both branches' gradients)
  auto [x, h1] = kernels::modulated_norm_branch(in.x, mod[0], mod[1], eps_);
  x = gated_add(x, self_attn(h1, in.rope, in.pattern, in.kv), mod[2]);
  // 2) cross-attention on text, affine norm3, no gate
  auto [x_res3, h3] = kernels::layer_norm_branch(x, norm3->weight, norm3->bias, norm3->options.eps());
  // (a stream's pass with autograd runs the full cross-attention, so a LoRA on its k and v gets the text's gradients)
  x = x_res3 + (in.kv && !in.kv.history && in.kv.cache->has_text()
                    ? cross_attn->forward_cached(h3, in.kv.cache->text_k(in.kv.block), in.kv.cache->text_v(in.kv.block),
                                                 in.ctx_ids)
                    : cross_attn(h3, in.ctx, in.ctx_ids));
  // 3) FFN with adaLN
  //    (ffn.0 and ffn.2 called one by one, so a LoRA attached to either takes part)
  torch::nn::Linear ffn0(std::dynamic_pointer_cast<torch::nn::LinearImpl>(ffn->ptr(0)));
  torch::nn::Linear ffn2(std::dynamic_pointer_cast<torch::nn::LinearImpl>(ffn->ptr(2)));
  auto [x_res, h2] = kernels::modulated_norm_branch(x, mod[3], mod[4], eps_);
  //    (ffn.1's GELU-tanh handed to ffn.2's GEMM as its input's activation: an FP8 GEMM applies it on the way)
  const auto h = lora_or_linear(ffn0, h2);  // [B, L, ffn_dim]
  x = gated_add(x_res, lora_or_linear(ffn2, h, InputAct::gelu_tanh), mod[5]);
  return x;
}

}  // namespace vdt
