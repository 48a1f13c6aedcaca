// Attention. q/k RMSNorm is applied over the full width before the head split (Wan's qk_norm), RoPE only in
// self-attention, and cross-attention has no mask: all Lt text rows are attended, padding included (wan_spec §3.5).
#include "model/attention.h"

#include <ATen/ops/rms_norm.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/torch.h>

#include "model/kept_ops.h"
#include "model/kernels/row_gather.h"
#include "model/kernels/wan_qk_norm_rope.h"
#include "model/lora.h"

namespace vdt {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // ATen's rms_norm (statistics in float32) without the weight, so the cast to x's dtype still comes before the weight
  // multiply, as in Wan; on CUDA one kernel pair forward and backward (kernels/wan_qk_norm_rope.h). rms_norm_reference
  // is the spelled-out form (tests).
  return kernels::wan_rms_norm(x, weight, eps_);
}

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto xf = x.to(torch::kFloat32);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return y.to(x.scalar_type()) * weight;
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, AttentionKernel kernel) {
  if (kernel == AttentionKernel::sdpa) return at::scaled_dot_product_attention(q, k, v);
  auto scores = torch::matmul(q.to(torch::kFloat32), k.to(torch::kFloat32).transpose(-2, -1)) /
                std::sqrt(static_cast<double>(q.size(-1)));                  // [B, N, Lq, Lk]
  return torch::matmul(torch::softmax(scores, -1), v.to(torch::kFloat32)).to(q.scalar_type());
}

namespace {
// [B, L, D] -> [B, N, L, Dh]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.unflatten(-1, {heads, -1}).transpose(1, 2);
}
// [B, N, L, Dh] -> [B, L, D]
torch::Tensor merge_heads(const torch::Tensor& x) { return x.transpose(1, 2).flatten(2); }
}  // namespace

SelfAttentionImpl::SelfAttentionImpl(int64_t dim, int64_t num_heads, double eps) : heads_(num_heads) {
  q = register_module("q", torch::nn::Linear(dim, dim));
  k = register_module("k", torch::nn::Linear(dim, dim));
  v = register_module("v", torch::nn::Linear(dim, dim));
  o = register_module("o", torch::nn::Linear(dim, dim));
  norm_q = register_module("norm_q", RMSNorm(dim, eps));
  norm_k = register_module("norm_k", RMSNorm(dim, eps));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const RopeTable& rope, TokenPattern pattern) {
  const auto qkv = lora_or_linear_shared_input({&q, &k, &v}, x, fuse_lora_qkv);  // 3 x [B, L, D]
  // q/k RMSNorm over the full width, the weight, then RoPE per head as one node (kernels/wan_qk_norm_rope.h; the
  // reference ops, norm_q / norm_k then apply_rope, with the fused-kernel switch off): 2 x [B, L, D] -> [B, L, N, Dh]
  auto [qh, kh] = kernels::wan_qk_norm_rope(qkv[0], qkv[1], norm_q->weight, norm_k->weight, norm_q->eps(), rope.cos,
                                            rope.sin, heads_);
  auto vh = qkv[2].unflatten(-1, {heads_, -1});
  const auto ck = kernel == AttentionKernel::eager ? CausalKernel::eager : causal_kernel;
  auto a = kept_attention(  // [B, N, L, Dh]
      {qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2)}, [&](const std::vector<torch::Tensor>& t) {
        return pattern.causal()
                   ? block_causal_attention(t[0], t[1], t[2], pattern.chunk_tokens, ck, pattern.teacher_forcing)
                   : attention(t[0], t[1], t[2], kernel);
      });
  return lora_or_linear(o, merge_heads(a));
}

torch::Tensor CrossAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& ctx_in,
                                          const torch::Tensor& ctx_ids) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  auto qx = norm_q(lora_or_linear(q, x));
  auto kc = norm_k(lora_or_linear(k, ctx_in));  // per row when ctx_ids is given
  auto vc = lora_or_linear(v, ctx_in);
  if (ctx_ids.defined()) {  // rows [R, Lt, D], one per distinct cell text; ctx_ids [B, F] the row of each frame
    TORCH_CHECK(ctx_in.dim() == 3 && ctx_ids.dim() == 2 && ctx_ids.size(0) == B, "cross_attn: expected rows [R, Lt, D] "
                "and ctx_ids [B, F], got ", ctx_in.sizes(), " and ", ctx_ids.sizes());
    const int64_t F = ctx_ids.size(1);
    TORCH_CHECK(L % F == 0, "cross_attn: ", L, " tokens do not split into ", F, " cells");
    // Frames fold into the batch, frame f's tokens seeing only its row. The rows are picked per frame inside the
    // attention call, so a policy that keeps the attention (selective checkpointing) keeps the pick with it and its
    // recompute skips the copy.
    auto attend_cells = [this, idx = ctx_ids.flatten()](const std::vector<torch::Tensor>& t) {
      auto kf = kernels::gather_rows(t[1], idx);  // [R, Lt, D] -> [B*F, Lt, D]; one kernel backward on CUDA
      auto vf = kernels::gather_rows(t[2], idx);
      return attention(t[0], split_heads(kf, heads_), split_heads(vf, heads_), kernel);
    };
    auto qf = qx.reshape({B * F, L / F, D});  // [B, L, D] -> [B*F, L/F, D]
    auto a = kept_attention({split_heads(qf, heads_), kc, vc}, attend_cells);
    return lora_or_linear(o, merge_heads(a).reshape({B, L, D}));  // [B*F, L/F, D] -> [B, L, D]
  }
  auto attend = [this](const std::vector<torch::Tensor>& t) { return attention(t[0], t[1], t[2], kernel); };
  if (ctx_in.dim() == 3) {  // one text for the whole clip [B, Lt, D]
    auto a = kept_attention({split_heads(qx, heads_), split_heads(kc, heads_), split_heads(vc, heads_)}, attend);
    return lora_or_linear(o, merge_heads(a));  // [B, L, D]
  }
  // Per-cell text given per cell [B, F, Lt, D]: fold frames into the batch so frame f's tokens see only cell f.
  const int64_t F = ctx_in.size(1), Lt = ctx_in.size(2);
  TORCH_CHECK(L % F == 0, "cross_attn: ", L, " tokens do not split into ", F, " cells");
  auto qf = qx.reshape({B * F, L / F, D});   // [B, L, D] -> [B*F, L/F, D]
  auto kf = kc.reshape({B * F, Lt, D});      // [B, F, Lt, D] -> [B*F, Lt, D]
  auto vf = vc.reshape({B * F, Lt, D});
  auto a = kept_attention({split_heads(qf, heads_), split_heads(kf, heads_), split_heads(vf, heads_)}, attend);
  return lora_or_linear(o, merge_heads(a).reshape({B, L, D}));  // [B*F, L/F, D] -> [B, L, D]
}

}  // namespace vdt
