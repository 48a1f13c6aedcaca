// Attention. q/k RMSNorm is applied over the full width before the head split (Wan's qk_norm), RoPE only in
// self-attention, and cross-attention has no mask: all Lt text rows are attended, padding included (docs/design.md §1).
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

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        AttentionKernel kernel) {
  if (kernel == AttentionKernel::sdpa) return at::scaled_dot_product_attention(q, k, v);
  auto scores = torch::matmul(q.to(torch::kFloat32), k.to(torch::kFloat32).transpose(-2, -1)) /
                std::sqrt(static_cast<double>(q.size(-1)));  // [B, N, Lq, Lk]
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

bool SelfAttentionImpl::norms_in_attention() const {
  // A LoRA's sum with the base output is no kept GEMM output: kept with the attention it would stay alive from forward
  // to backward (selective checkpointing), where the norms outside keep nothing (their recompute makes it again).
  return !lora_active(q) && !lora_active(k);
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const RopeTable& rope, TokenPattern pattern,
                                         KvSlot kv) {
  const auto qkv = lora_or_linear_shared_input({&q, &k, &v}, x, fuse_lora_qkv);  // 3 x [B, L, D]
  // q/k RMSNorm over the full width, the weight, then RoPE per head as one node (kernels/wan_qk_norm_rope.h; the
  // reference ops, norm_q / norm_k then apply_rope, with the fused-kernel switch off): 2 x [B, L, D] -> [B, L, N, Dh].
  // Inside the attention call when the projections are plain GEMMs: a policy that keeps the attention (selective
  // checkpointing) then keeps the node with it, its inputs being the kept GEMM outputs, and its recompute skips it.
  auto norm_rope = [&](const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& w_q,
                       const torch::Tensor& w_k) {
    return kernels::wan_qk_norm_rope(q_in, k_in, w_q, w_k, norm_q->eps(), rope.cos, rope.sin, heads_);
  };
  if (kv) {  // a stream's chunk: attention over the cache (sampling) or over the pass's history (with autograd)
    auto [qh, kh] = norm_rope(qkv[0], qkv[1], norm_q->weight, norm_k->weight);  // [B, L, N, Dh]
    const auto vh = qkv[2].unflatten(-1, {heads_, -1});                         // [B, L, D] -> [B, L, N, Dh]
    if (kv.history) return lora_or_linear(o, merge_heads(kv.history->attend(kv.block, qh, kh, vh, kernel)));
    const auto raw = kv.cache->wants_raw_keys()  // the sink's keys before rotation, rotated again as the window moves
                         ? kernels::wan_rms_norm(qkv[1], norm_k->weight, norm_k->eps()).unflatten(-1, {heads_, -1})
                         : torch::Tensor();
    const auto a = kv.cache->attend(kv.block, qh, kh, vh, kernel, raw);
    return lora_or_linear(o, merge_heads(a));  // [B, N, L, Dh] -> [B, L, D]
  }
  const auto ck = kernel == AttentionKernel::eager ? CausalKernel::eager : causal_kernel;
  auto attend = [&](const torch::Tensor& qh, const torch::Tensor& kh, const torch::Tensor& vh) {  // [B, L, N, Dh]
    const auto qt = qh.transpose(1, 2), kt = kh.transpose(1, 2), vt = vh.transpose(1, 2);         // -> [B, N, L, Dh]
    return pattern.causal() ? block_causal_attention(qt, kt, vt, pattern.chunk_tokens, ck, pattern.teacher_forcing)
                            : attention(qt, kt, vt, kernel);
  };
  torch::Tensor a;  // [B, N, L, Dh]
  if (norms_in_attention()) {
    a = kept_attention({qkv[0], qkv[1], qkv[2], norm_q->weight, norm_k->weight},
                       [&](const std::vector<torch::Tensor>& t) {
                         auto [qh, kh] = norm_rope(t[0], t[1], t[3], t[4]);
                         return attend(qh, kh, t[2].unflatten(-1, {heads_, -1}));
                       });
  } else {
    auto [qh, kh] = norm_rope(qkv[0], qkv[1], norm_q->weight, norm_k->weight);
    a = kept_attention({qh, kh, qkv[2].unflatten(-1, {heads_, -1})},
                       [&](const std::vector<torch::Tensor>& t) { return attend(t[0], t[1], t[2]); });
  }
  return lora_or_linear(o, merge_heads(a));
}

torch::Tensor CrossAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& ctx,
                                          const torch::Tensor& ctx_ids) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  // Cells: the tokens of latent frame f (L/F of them, in order) attend only to cell f's text; one cell for one text.
  int64_t F = 1;
  if (ctx_ids.defined()) {  // distinct rows [R, Lt, D], ctx_ids [B, F] the row of each frame
    TORCH_CHECK(ctx.dim() == 3 && ctx_ids.dim() == 2 && ctx_ids.size(0) == B,
                "cross_attn: expected rows [R, Lt, D] "
                "and ctx_ids [B, F], got ",
                ctx.sizes(), " and ", ctx_ids.sizes());
    F = ctx_ids.size(1);
  } else if (ctx.dim() == 4) {  // [B, F, Lt, D]
    F = ctx.size(1);
  }
  TORCH_CHECK(L % F == 0, "cross_attn: ", L, " tokens do not split into ", F, " cells");
  auto q_in = lora_or_linear(q, x);    // [B, L, D]
  auto k_in = lora_or_linear(k, ctx);  // like ctx: [B, Lt, D], [B, F, Lt, D] or rows [R, Lt, D]
  auto v_in = lora_or_linear(v, ctx);
  // The q / k norms (as self-attention's, when the projections are plain GEMMs) and the per-cell row pick run inside
  // the attention call: a policy that keeps the attention keeps them with it and its recompute skips them.
  const bool inside = norms_in_attention();
  const auto ids = ctx_ids.defined() ? ctx_ids.flatten() : torch::Tensor();
  auto attend = [&](const std::vector<torch::Tensor>& t) {
    auto qn = inside ? kernels::wan_rms_norm(t[0], t[3], norm_q->eps()) : t[0];
    auto kn = inside ? kernels::wan_rms_norm(t[1], t[4], norm_k->eps()) : t[1];
    auto vn = t[2];
    if (ids.defined()) {  // rows [R, Lt, D] -> cells [B*F, Lt, D]; one kernel backward on CUDA
      kn = kernels::gather_rows(kn, ids);
      vn = kernels::gather_rows(vn, ids);
    }
    const int64_t Lt = kn.size(-2);
    qn = qn.reshape({B * F, L / F, D});  // frames fold into the batch: [B, L, D] -> [B*F, L/F, D]
    kn = kn.reshape({B * F, Lt, D});     // [B(, F), Lt, D] -> [B*F, Lt, D]
    vn = vn.reshape({B * F, Lt, D});
    return attention(split_heads(qn, heads_), split_heads(kn, heads_), split_heads(vn, heads_), kernel);
  };
  auto a = inside ? kept_attention({q_in, k_in, v_in, norm_q->weight, norm_k->weight}, attend)
                  : kept_attention({norm_q(q_in), norm_k(k_in), v_in}, attend);  // [B*F, N, L/F, Dh]
  return lora_or_linear(o, merge_heads(a).reshape({B, L, D}));                   // [B*F, L/F, D] -> [B, L, D]
}

std::pair<torch::Tensor, torch::Tensor> CrossAttentionImpl::text_kv(const torch::Tensor& ctx) {
  // As forward's attention call: the k norm on the projection (inside or outside the kept call, the same kernel)
  return {kernels::wan_rms_norm(lora_or_linear(k, ctx), norm_k->weight, norm_k->eps()), lora_or_linear(v, ctx)};
}

torch::Tensor CrossAttentionImpl::forward_cached(const torch::Tensor& x, const torch::Tensor& kc,
                                                 const torch::Tensor& vc, const torch::Tensor& ctx_ids) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  int64_t F = 1;
  if (ctx_ids.defined()) {  // rows [R, Lt, D] picked per cell, as forward
    TORCH_CHECK(kc.dim() == 3 && ctx_ids.dim() == 2 && ctx_ids.size(0) == B,
                "cross_attn: expected rows [R, Lt, D] "
                "and ctx_ids [B, F], got ",
                kc.sizes(), " and ", ctx_ids.sizes());
    F = ctx_ids.size(1);
  } else if (kc.dim() == 4) {
    F = kc.size(1);
  }
  TORCH_CHECK(L % F == 0, "cross_attn: ", L, " tokens do not split into ", F, " cells");
  auto qn = kernels::wan_rms_norm(lora_or_linear(q, x), norm_q->weight, norm_q->eps());  // [B, L, D]
  auto kn = kc, vn = vc;
  if (ctx_ids.defined()) {
    const auto ids = ctx_ids.flatten();
    kn = kernels::gather_rows(kn, ids);
    vn = kernels::gather_rows(vn, ids);
  }
  const int64_t Lt = kn.size(-2);
  qn = qn.reshape({B * F, L / F, D});  // [B, L, D] -> [B*F, L/F, D]
  kn = kn.reshape({B * F, Lt, D});
  vn = vn.reshape({B * F, Lt, D});
  const auto a = attention(split_heads(qn, heads_), split_heads(kn, heads_), split_heads(vn, heads_), kernel);
  return lora_or_linear(o, merge_heads(a).reshape({B, L, D}));  // [B*F, L/F, D] -> [B, L, D]
}

}  // namespace vdt
