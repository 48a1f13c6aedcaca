// One SDPA backend call per query block forward and backward, inside one autograd node (ranged_attention.h).
// Per block the backend keeps: the log-sum-exp [B, N, len] (float32) and, on CUDA, the RNG state and sequence
// offsets its backward takes (empty without dropout). Outputs are written into one tensor shaped like q, and its
// slices are what backward hands each block's backward as `out`.
#include "model/ranged_attention.h"

#include <ATen/SDPBackend.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_backward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_backward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>

namespace vdt {
namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What one block's forward leaves for its backward, besides q, k, v and the output slice.
struct BlockState {
  torch::Tensor lse, seed, offset, cum_q, cum_k;  // undefined where the backend has none
  int64_t max_q = 0, max_k = 0;
};

at::SDPBackend backend_for(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return static_cast<at::SDPBackend>(at::_fused_sdp_choice(q, k, v));
}

// The block's keys along dim 2: a view for one range, else the ranges concatenated.
torch::Tensor gather_keys(const torch::Tensor& t, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  if (ranges.size() == 1) return t.narrow(2, ranges[0].first, ranges[0].second - ranges[0].first);
  std::vector<torch::Tensor> parts;
  for (const auto& [k0, k1] : ranges) parts.push_back(t.narrow(2, k0, k1 - k0));
  return torch::cat(parts, 2);  // [B, N, sum of range lengths, Dh]
}

// The key gradients [B, N, Lk, Dh] summed from the blocks' parts in block order without a zero-filled start: a key
// row's first part is copied (0 + x is x), the later ones added, and the rows no block saw are zeroed at the end.
// covered: the key rows written so far, as ascending disjoint [first, second) runs.
struct KeyGradSum {
  torch::Tensor full;
  std::vector<std::pair<int64_t, int64_t>> covered;

  // Adds a block's key gradient [B, N, sum of lengths, Dh] into the full one's ranges.
  void add(const torch::Tensor& part, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    int64_t at = 0;
    for (const auto& [k0, k1] : ranges) {
      int64_t pos = k0;
      for (const auto& [c0, c1] : covered) {  // [pos, k1) split into its unwritten and written runs
        if (c0 >= k1) break;
        if (c1 <= pos) continue;
        if (c0 > pos) write(part, at + pos - k0, pos, c0, /*first=*/true), pos = c0;
        const int64_t end = std::min(c1, k1);
        write(part, at + pos - k0, pos, end, /*first=*/false), pos = end;
      }
      if (pos < k1) write(part, at + pos - k0, pos, k1, /*first=*/true);
      cover(k0, k1);
      at += k1 - k0;
    }
  }
  // Zeroes the key rows no block saw; returns the sum.
  torch::Tensor finish() {
    int64_t pos = 0;
    for (const auto& [c0, c1] : covered) {
      if (c0 > pos) full.narrow(2, pos, c0 - pos).zero_();
      pos = c1;
    }
    if (pos < full.size(2)) full.narrow(2, pos, full.size(2) - pos).zero_();
    return full;
  }

 private:
  void write(const torch::Tensor& part, int64_t from, int64_t k0, int64_t k1, bool first) {
    auto dst = full.narrow(2, k0, k1 - k0);
    const auto src = part.narrow(2, from, k1 - k0);
    first ? dst.copy_(src) : dst.add_(src);
  }
  void cover(int64_t k0, int64_t k1) {  // merges [k0, k1) into the runs
    covered.emplace_back(k0, k1);
    std::sort(covered.begin(), covered.end());
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (const auto& r : covered) {
      if (merged.empty() || r.first > merged.back().second) merged.push_back(r);
      else merged.back().second = std::max(merged.back().second, r.second);
    }
    covered = std::move(merged);
  }
};

torch::Tensor block_forward(at::SDPBackend backend, const torch::Tensor& q, const torch::Tensor& k,
                            const torch::Tensor& v, BlockState& st) {
  switch (backend) {
    case at::SDPBackend::cudnn_attention: {
      auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, /*compute_log_sumexp=*/true);
      st.lse = std::get<1>(r), st.cum_q = std::get<2>(r), st.cum_k = std::get<3>(r);
      st.max_q = std::get<4>(r).expect_int(), st.max_k = std::get<5>(r).expect_int();
      st.seed = std::get<6>(r), st.offset = std::get<7>(r);
      return std::get<0>(r);
    }
    case at::SDPBackend::flash_attention: {
      if (q.device().is_cpu()) {
        auto r = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v);
        st.lse = std::get<1>(r);
        return std::get<0>(r);
      }
      auto r = at::_scaled_dot_product_flash_attention(q, k, v);
      st.lse = std::get<1>(r), st.cum_q = std::get<2>(r), st.cum_k = std::get<3>(r);
      st.max_q = std::get<4>(r).expect_int(), st.max_k = std::get<5>(r).expect_int();
      st.seed = std::get<6>(r), st.offset = std::get<7>(r);
      return std::get<0>(r);
    }
    case at::SDPBackend::efficient_attention: {
      auto r = at::_scaled_dot_product_efficient_attention(q, k, v, std::nullopt, /*compute_log_sumexp=*/true);
      st.lse = std::get<1>(r), st.seed = std::get<2>(r), st.offset = std::get<3>(r);
      return std::get<0>(r);
    }
    default:
      TORCH_CHECK(false, "ranged_attention: no fused SDPA backend for q ", q.sizes(), " ", q.scalar_type(), " on ",
                  q.device(), " (the per-block autograd path handles it)");
  }
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> block_backward(at::SDPBackend backend, const torch::Tensor& g,
                                                                       const torch::Tensor& q, const torch::Tensor& k,
                                                                       const torch::Tensor& v, const torch::Tensor& out,
                                                                       const BlockState& st) {
  switch (backend) {
    case at::SDPBackend::cudnn_attention:
      return at::_scaled_dot_product_cudnn_attention_backward(g, q, k, v, out, st.lse, st.seed, st.offset,
                                                              torch::Tensor(), st.cum_q, st.cum_k, st.max_q, st.max_k,
                                                              /*dropout_p=*/0.0, /*is_causal=*/false);
    case at::SDPBackend::flash_attention:
      if (q.device().is_cpu())
        return at::_scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, out, st.lse, 0.0, false);
      return at::_scaled_dot_product_flash_attention_backward(g, q, k, v, out, st.lse, st.cum_q, st.cum_k, st.max_q,
                                                              st.max_k, 0.0, false, st.seed, st.offset);
    case at::SDPBackend::efficient_attention: {
      auto r = at::_scaled_dot_product_efficient_attention_backward(g, q, k, v, torch::Tensor(), out, st.lse, st.seed,
                                                                    st.offset, 0.0, {true, true, true, false});
      return {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
    }
    default:
      TORCH_CHECK(false, "ranged_attention: backend ", static_cast<int>(backend), " has no backward here");
  }
}

// Blocks as one int list for the autograd context: per block begin, end, number of ranges, then the ranges.
std::vector<int64_t> encode(const std::vector<QueryBlock>& blocks) {
  std::vector<int64_t> out;
  for (const auto& b : blocks) {
    out.insert(out.end(), {b.begin, b.end, static_cast<int64_t>(b.keys.size())});
    for (const auto& [k0, k1] : b.keys) out.insert(out.end(), {k0, k1});
  }
  return out;
}
std::vector<QueryBlock> decode(const std::vector<int64_t>& flat) {
  std::vector<QueryBlock> blocks;
  for (size_t i = 0; i < flat.size();) {
    QueryBlock b{flat[i], flat[i + 1], {}};
    const int64_t n = flat[i + 2];
    i += 3;
    for (int64_t r = 0; r < n; ++r, i += 2) b.keys.emplace_back(flat[i], flat[i + 1]);
    blocks.push_back(std::move(b));
  }
  return blocks;
}

class RangedAttentionFn : public torch::autograd::Function<RangedAttentionFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const std::vector<int64_t>& flat) {
    const auto blocks = decode(flat);
    const auto backend = backend_for(q.narrow(2, blocks[0].begin, blocks[0].end - blocks[0].begin),
                                     gather_keys(k, blocks[0].keys), gather_keys(v, blocks[0].keys));
    auto out = torch::empty_like(q);  // q's strides (H3 hands [1, N, S, Dh] views of [S, N, Dh] rows)
    variable_list saved{q, k, v, out};
    std::vector<int64_t> maxes;
    for (const auto& b : blocks) {
      BlockState st;
      auto o = block_forward(backend, q.narrow(2, b.begin, b.end - b.begin), gather_keys(k, b.keys),
                             gather_keys(v, b.keys), st);  // [B, N, len, Dh]
      out.narrow(2, b.begin, b.end - b.begin).copy_(o);
      saved.insert(saved.end(), {st.lse, st.seed, st.offset, st.cum_q, st.cum_k});
      maxes.insert(maxes.end(), {st.max_q, st.max_k});
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["blocks"] = flat;
    ctx->saved_data["maxes"] = maxes;
    ctx->saved_data["backend"] = static_cast<int64_t>(backend);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto blocks = decode(ctx->saved_data["blocks"].toIntVector());
    const auto maxes = ctx->saved_data["maxes"].toIntVector();
    const auto backend = static_cast<at::SDPBackend>(ctx->saved_data["backend"].toInt());
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3];
    auto g = grads[0];
    if (g.strides() != out.strides()) g = torch::empty_like(out).copy_(g);  // each block's dO laid out as its O
    auto dq = torch::empty_like(q);
    KeyGradSum dk{torch::empty_like(k), {}}, dv{torch::empty_like(v), {}};
    for (size_t i = 0; i < blocks.size(); ++i) {
      const auto& b = blocks[i];
      const int64_t len = b.end - b.begin;
      BlockState st{saved[4 + 5 * i], saved[5 + 5 * i], saved[6 + 5 * i], saved[7 + 5 * i], saved[8 + 5 * i],
                    maxes[2 * i], maxes[2 * i + 1]};
      auto [gq, gk, gv] = block_backward(backend, g.narrow(2, b.begin, len), q.narrow(2, b.begin, len),
                                         gather_keys(k, b.keys), gather_keys(v, b.keys), out.narrow(2, b.begin, len),
                                         st);
      dq.narrow(2, b.begin, len).copy_(gq);
      dk.add(gk, b.keys);
      dv.add(gv, b.keys);
    }
    return {dq, dk.finish(), dv.finish(), torch::Tensor()};
  }
};
}  // namespace

bool ranged_attention_supported(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return backend_for(q, k, v) != at::SDPBackend::math;
}

torch::Tensor ranged_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const std::vector<QueryBlock>& blocks) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && !blocks.empty(), "ranged_attention: expected q, k, v ",
              "[B, N, L, Dh] and at least one block, got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  int64_t next = 0;
  for (const auto& b : blocks) {
    TORCH_CHECK(b.begin == next && b.end > b.begin && !b.keys.empty(), "ranged_attention: query blocks must cover ",
                "rows 0..", q.size(2), " in order (block ", b.begin, "..", b.end, " after row ", next, ")");
    for (const auto& [k0, k1] : b.keys)
      TORCH_CHECK(0 <= k0 && k0 < k1 && k1 <= k.size(2), "ranged_attention: key range ", k0, "..", k1, " outside 0..",
                  k.size(2));
    next = b.end;
  }
  TORCH_CHECK(next == q.size(2), "ranged_attention: query blocks end at row ", next, ", expected ", q.size(2));
  return RangedAttentionFn::apply(q, k, v, encode(blocks));
}

}  // namespace vdt
