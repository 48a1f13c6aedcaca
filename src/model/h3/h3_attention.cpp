// H3 attention, as DiffSynth's MiniMaxH3Attention / MiniMaxH3Rope / _sdpa_varlen_attention (docs/h3_model.md §1.3,
// §1.7). The float32 recipe of the rotary table is the reference's op by op: inv_freq = reciprocal(10000 ** (i / R)),
// angles = float32(pos) * inv_freq, then cos/sin cast to the activations' dtype.
#include "model/h3/h3_attention.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/torch.h>

#include <optional>

#include "model/kept_ops.h"
#include "model/kernels/qk_norm_rope.h"
#include "model/lora.h"

namespace vdt {
namespace {
thread_local std::optional<torch::TensorOptions> fast_build;  // set by H3FastBuild
}  // namespace

H3FastBuild::H3FastBuild(torch::Device device, torch::ScalarType dtype) {
  fast_build = torch::TensorOptions().device(device).dtype(dtype);
}
H3FastBuild::~H3FastBuild() { fast_build.reset(); }

torch::nn::Linear h3_linear(int64_t in, int64_t out, bool bias) {
  if (!fast_build) return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  torch::nn::Linear l(torch::nn::LinearOptions(1, 1).bias(bias));  // then resized on the device, no host init
  torch::NoGradGuard ng;
  l->options.in_features(in).out_features(out);
  l->weight.set_data(torch::zeros({out, in}, *fast_build));
  if (bias) l->bias.set_data(torch::zeros({out}, *fast_build));
  return l;
}

H3RopeTable h3_rope_table(const torch::Tensor& positions, int64_t rope_len) {
  TORCH_CHECK(positions.dim() == 2 && positions.size(1) == 3, "h3 rope: expected positions [S, 3], got ",
              positions.sizes());
  auto pos = positions.to(torch::kFloat32);  // [S, 3]
  auto steps = torch::arange(rope_len, pos.options());
  auto inv_freq = torch::pow(10000.0, steps / static_cast<double>(rope_len)).reciprocal();  // [R]
  auto per_axis = pos.unsqueeze(-1) * inv_freq.view({1, 1, -1});                            // [S, 3, R]
  auto half = per_axis.flatten(1);            // [S, 3, R] -> [S, 3R] (t|h|w)
  auto freqs = torch::cat({half, half}, -1);  // [S, 6R]
  return {freqs.cos(), freqs.sin()};
}

torch::Tensor h3_apply_rope(const torch::Tensor& x, const H3RopeTable& rope) {
  const int64_t rot = rope.cos.size(-1);
  TORCH_CHECK(x.dim() == 3 && x.size(0) == rope.cos.size(0) && rot <= x.size(-1) && rot % 2 == 0, "h3 rope: expected ",
              "x [S=", rope.cos.size(0), ", N, Dh >= ", rot, "], got ", x.sizes());
  // [S, 6R] -> [S, 1, 6R] in x's dtype
  return kernels::rotate(x, rope.cos.to(x.scalar_type()).unsqueeze(1), rope.sin.to(x.scalar_type()).unsqueeze(1));
}

H3AttentionLayout H3AttentionLayout::segments(const std::vector<int64_t>& bounds, int64_t S) {
  TORCH_CHECK(bounds.size() >= 2 && bounds.front() == 0 && bounds.back() == S, "h3 attention: segment bounds ",
              "must run from 0 to S = ", S);
  H3AttentionLayout l;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    TORCH_CHECK(bounds[i + 1] >= bounds[i], "h3 attention: segment bounds must not decrease, got ", bounds[i], " then ",
                bounds[i + 1]);
    if (bounds[i + 1] > bounds[i]) l.blocks.push_back({bounds[i], bounds[i + 1], {{bounds[i], bounds[i + 1]}}});
  }
  return l;
}

bool H3AttentionLayout::segments_only() const {
  for (const auto& b : blocks)
    if (b.keys.size() != 1 || b.keys[0].first != b.begin || b.keys[0].second != b.end) return false;
  return true;
}

torch::Tensor H3AttentionLayout::dense_mask(int64_t S, torch::Device device) const {
  auto m = torch::zeros({S, S}, torch::TensorOptions().device(device).dtype(torch::kBool));  // filled where it lives
  for (const auto& b : blocks)
    for (const auto& [k0, k1] : b.keys) m.slice(0, b.begin, b.end).slice(1, k0, k1).fill_(true);
  return m;
}

torch::Tensor layout_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const H3AttentionLayout& layout, AttentionKernel kernel, bool per_block_autograd) {
  const int64_t S = q.size(0);
  auto heads_first = [](const torch::Tensor& t) {
    return t.transpose(0, 1).unsqueeze(0);
  };  // [L, N, Dh] -> [1, N, L, Dh]
  if (layout.mask.defined() && kernel == AttentionKernel::sdpa) {
    TORCH_CHECK(layout.mask.dim() == 2 && layout.mask.size(0) == S && layout.mask.size(1) == S, "h3 attention: mask ",
                layout.mask.sizes(), " for ", S, " rows");
    auto out = at::scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v), layout.mask);
    return out.squeeze(0).transpose(0, 1);  // [1, N, S, Dh] -> [S, N, Dh]
  }
  if (kernel == AttentionKernel::sdpa && !per_block_autograd && layout.blocks.size() > 1) {
    auto qh = heads_first(q), kh = heads_first(k), vh = heads_first(v);
    if (ranged_attention_supported(qh, kh, vh))
      return ranged_attention(qh, kh, vh, layout.blocks).squeeze(0).transpose(0, 1);  // [1, N, S, Dh] -> [S, N, Dh]
  }
  std::vector<torch::Tensor> parts;
  int64_t next = 0;
  for (const auto& b : layout.blocks) {
    TORCH_CHECK(b.begin == next && b.end > b.begin && !b.keys.empty(), "h3 attention: query blocks must cover rows 0..",
                S, " in order without gaps (block ", b.begin, "..", b.end, " after row ", next, ")");
    next = b.end;
    auto keys = [&](const torch::Tensor& t) {
      if (b.keys.size() == 1) return t.narrow(0, b.keys[0].first, b.keys[0].second - b.keys[0].first);
      std::vector<torch::Tensor> ranges;
      for (const auto& [k0, k1] : b.keys) ranges.push_back(t.narrow(0, k0, k1 - k0));
      return torch::cat(ranges, 0);
    };
    auto out = attention(heads_first(q.narrow(0, b.begin, b.end - b.begin)), heads_first(keys(k)), heads_first(keys(v)),
                         kernel);                     // [1, N, len, Dh]
    parts.push_back(out.squeeze(0).transpose(0, 1));  // -> [len, N, Dh]
  }
  TORCH_CHECK(next == S, "h3 attention: query blocks end at row ", next, ", expected S = ", S);
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
}

torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const std::vector<int64_t>& bounds, AttentionKernel kernel) {
  return layout_attention(q, k, v, H3AttentionLayout::segments(bounds, q.size(0)), kernel);
}

H3AttentionImpl::H3AttentionImpl(int64_t dim, int64_t heads, int64_t head_dim, double qk_eps)
    : heads_(heads), head_dim_(head_dim), qk_eps_(qk_eps) {
  qkv_proj = register_module("qkv_proj", h3_linear(dim, 3 * heads * head_dim, /*bias=*/false));
  q_norm = register_module("q_norm", RMSNorm(head_dim, qk_eps));
  k_norm = register_module("k_norm", RMSNorm(head_dim, qk_eps));
  out_proj = register_module("out_proj", h3_linear(heads * head_dim, dim, /*bias=*/false));
}

torch::Tensor H3AttentionImpl::forward(const torch::Tensor& x, const H3RopeTable* rope, const H3AttentionLayout& layout,
                                       KvSlot kv) {
  const int64_t S = x.size(0);
  // Rows per head are [q | k | v] (the original checkpoint's order, docs/h3_model.md §1.9).
  auto qkv = lora_or_linear(qkv_proj, x).view({S, heads_, 3, head_dim_});  // [S, 3*N*Dh] -> [S, N, 3, Dh]
  torch::Tensor q, k, v;                                                   // [S, N, Dh]
  if (kv && rope && !kv.history) {  // a stream: k and v written straight into the cache's rows, attention over it
    auto [k_rows, v_rows] = kv.cache->pass_rows(kv.block);  // [1, S, N, Dh] views of the cache
    q = kernels::h3_qk_norm_rope_into(qkv, q_norm->weight, k_norm->weight, qk_eps_, rope->cos, rope->sin, k_rows[0],
                                      v_rows[0]);
    // the sink's keys before rotation [1, S, N, Dh], rotated again as the window moves
    const auto raw = kv.cache->wants_raw_keys() ? k_norm(qkv.select(2, 1)).unsqueeze(0) : torch::Tensor();
    const auto a = kv.cache->attend(kv.block, q.unsqueeze(0), k_rows, v_rows, kernel, raw);
    return lora_or_linear(out_proj, a[0].transpose(0, 1).reshape({S, heads_ * head_dim_}));  // [N, S, Dh] -> [S, D]
  }
  if (rope) {  // per-head RMSNorm, weight and RoPE of q and k as one node (model/kernels/qk_norm_rope.h)
    std::tie(q, k, v) = kernels::h3_qk_norm_rope(qkv, q_norm->weight, k_norm->weight, qk_eps_, rope->cos, rope->sin);
  } else {
    auto parts = qkv.unbind(2);  // 3 x [S, N, Dh] (one stack in backward, not three zero-filled selects)
    q = q_norm(parts[0]), k = k_norm(parts[1]), v = parts[2];
  }
  if (kv) {  // a stream: attention over the cache (sampling) or over the pass's history (with autograd)
    // the sink's keys before rotation [1, S, N, Dh], rotated again as the window moves
    const auto raw =
        !kv.history && kv.cache->wants_raw_keys() ? k_norm(qkv.select(2, 1)).unsqueeze(0) : torch::Tensor();
    const auto a = kv.history ? kv.history->attend(kv.block, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), kernel)
                              : kv.cache->attend(kv.block, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), kernel, raw);
    return lora_or_linear(out_proj, a[0].transpose(0, 1).reshape({S, heads_ * head_dim_}));  // [N, S, Dh] -> [S, D]
  }
  auto out = kept_attention({q, k, v}, [&](const std::vector<torch::Tensor>& t) {  // [S, N, Dh]
    return layout_attention(t[0], t[1], t[2], layout, kernel);
  });
  return lora_or_linear(out_proj, out.reshape({S, heads_ * head_dim_}));  // [S, N, Dh] -> [S, N*Dh] -> [S, D]
}

}  // namespace vdt
