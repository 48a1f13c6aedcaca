// One Wan DiT block (docs/design.md §1) under its checkpoint names: adaLN self-attention, affine-norm
// cross-attention (`norm3`), adaLN GELU-tanh FFN (`ffn.0`, `ffn.2`) and the learned `modulation` offset.
// Modulation is per timestep group: x [B, L, D] is viewed as [B, G, L/G, D] so that G = 1 (one timestep),
// G = F (per latent frame: TI2V first frame, diffusion-forcing chunks) and G = L (per token, the slow reference)
// share one code path. Not here: checkpointing or sharding (applied from outside through WanDiT's block runner).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/normalization.h>

#include "model/attention.h"

namespace vdt {

struct BlockInputs {
  torch::Tensor x;        // [B, L, D] residual stream
  torch::Tensor e0;       // [B, G, 6, D] time projection per timestep group (float32)
  torch::Tensor ctx;      // [B, Lt, D] or [B, F, Lt, D] embedded text, or distinct rows [R, Lt, D] with ctx_ids
  RopeTable rope;         // [L, Dh/2] tables
  TokenPattern pattern;   // self-attention: bidirectional, block-causal chunks of tokens, or teacher forcing
  torch::Tensor ctx_ids;  // optional [B, F] int64: the row of ctx for each cell (per-cell text as distinct rows)
  KvSlot kv;  // a stream's cache (model/kv_cache.h): x is the chunk being made; the text's keys and values come from
              // the cache (ctx unused), or, in a pass with autograd (kv.history), from ctx
};

class WanBlockImpl : public torch::nn::Module {
 public:
  WanBlockImpl(int64_t dim, int64_t ffn_dim, int64_t num_heads, double eps);
  torch::Tensor forward(const BlockInputs& in);  // -> [B, L, D]
  void set_attention_kernel(AttentionKernel k);

  SelfAttention self_attn{nullptr};
  CrossAttention cross_attn{nullptr};
  torch::nn::LayerNorm norm3{nullptr};
  torch::nn::Sequential ffn{nullptr};
  torch::Tensor modulation;  // [1, 6, D]

 private:
  double eps_;
};
TORCH_MODULE(WanBlock);

// LayerNorm without affine over the last dim, then x * (1 + scale) + shift per timestep group.
// x [B, L, D], shift/scale [B, G, 1, D] -> [B, L, D]
torch::Tensor modulated_norm(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                             double eps);
// x + y * gate per timestep group: x, y [B, L, D], gate [B, G, 1, D] -> [B, L, D]
torch::Tensor gated_add(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);

}  // namespace vdt
