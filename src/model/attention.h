// Wan attention modules under their checkpoint names: RMSNorm over the full width (`norm_q`, `norm_k`),
// self-attention with 3-axis RoPE (`self_attn`) and text cross-attention (`cross_attn`), plus the attention kernel:
// SDPA (cuDNN on Hopper, math on CPU) with an eager softmax reference beside it for tests.
// Self-attention can run block-causal (model/block_causal.h) when given a chunk size. Not here: any parallelism.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include "model/block_causal.h"
#include "model/embeddings.h"
#include "model/kv_cache.h"

namespace vdt {

// RMSNorm as Wan: y = cast(x_f32 * rsqrt(mean(x_f32^2) + eps)) * weight; the cast happens before the weight multiply.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // [..., D] -> [..., D]
  double eps() const { return eps_; }
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);
// The same RMSNorm spelled out op by op (the reference the fused path is tested against).
torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps);

enum class AttentionKernel { sdpa, eager };
// q [B, N, Lq, Dh], k/v [B, N, Lk, Dh] -> [B, N, Lq, Dh]. `eager` is the slow, obvious softmax(q k^T / sqrt(Dh)) v.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        AttentionKernel kernel = AttentionKernel::sdpa);

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t dim, int64_t num_heads, double eps);
  // pattern: bidirectional, block-causal over chunks of tokens (queries of chunk i see chunks 0..i), or teacher
  // forcing over [clean | noisy] halves (block_causal.h). With a stream's cache (kv): the rows are the chunk being
  // made and attend to the cache and themselves (model/kv_cache.h); the pattern is unused.
  torch::Tensor forward(const torch::Tensor& x, const RopeTable& rope, TokenPattern pattern = {},
                        KvSlot kv = {});  // [B, L, D] -> [B, L, D]
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  RMSNorm norm_q{nullptr}, norm_k{nullptr};
  AttentionKernel kernel = AttentionKernel::sdpa;
  CausalKernel causal_kernel = CausalKernel::prefix;
  bool fuse_lora_qkv = true;  // one GEMM for the LoRA A factors of q, k, v (lora_or_linear_shared_input); off: three

 protected:
  // Whether the q / k norms run inside the kept attention call (q and k carry no LoRA: their inputs are kept GEMM
  // outputs, so keeping the norms with the attention costs no memory).
  bool norms_in_attention() const;
  int64_t heads_;
};
TORCH_MODULE(SelfAttention);

// Text cross-attention is self-attention's module (the same q, k, v, o, norm_q, norm_k under the same names, as
// Wan's WanCrossAttention(WanSelfAttention)) with keys and values from the text and no RoPE.
class CrossAttentionImpl : public SelfAttentionImpl {
 public:
  using SelfAttentionImpl::SelfAttentionImpl;
  // x [B, L, D], ctx [B, Lt, D] (one text for all tokens) or [B, F, Lt, D] (per-cell text: the tokens of latent
  // frame f, L/F of them in order, attend only to ctx[:, f]) -> [B, L, D]. Per-cell text may also come as distinct
  // rows ctx [R, Lt, D] with ctx_ids [B, F] (row of each cell): k and v are then projected once per row, not per cell.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& ctx, const torch::Tensor& ctx_ids = {});
  // A stream's text, once: the normed keys and the values of ctx (any of forward's ctx shapes).
  std::pair<torch::Tensor, torch::Tensor> text_kv(const torch::Tensor& ctx);
  // forward with text_kv's keys and values (the same numbers as forward on their ctx).
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& ctx_ids = {});
};
TORCH_MODULE(CrossAttention);

}  // namespace vdt
