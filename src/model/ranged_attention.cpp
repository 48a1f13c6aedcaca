// One SDPA backend call per query block forward and backward, inside one autograd node (ranged_attention.h).
// Per block the backend keeps: the log-sum-exp [B, N, len] (float32) and, on CUDA, the RNG state and sequence
// offsets its backward takes (empty without dropout). Outputs are written into one tensor shaped like q, and its
// slices are what backward hands each block's backward as `out`. A RangedAttentionKeep installed on the thread keeps
// some blocks' outputs and states while recording and hands them back on replay (the block's forward is skipped).
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
#include <numeric>

#include "core/error.h"

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

// Adds a block's key gradient [B, N, sum of lengths, Dh] into the full one's ranges.
void scatter_keys(torch::Tensor& full, const torch::Tensor& part,
                  const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  int64_t at = 0;
  for (const auto& [k0, k1] : ranges) {
    full.narrow(2, k0, k1 - k0).add_(part.narrow(2, at, k1 - k0));
    at += k1 - k0;
  }
}

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

thread_local RangedAttentionKeep* current_keep = nullptr;
}  // namespace

// One call's record: which blocks keep, and their output [B, N, len, Dh] and state until the replay takes them.
struct RangedAttentionKeep::Call {
  std::vector<int64_t> layout, q_sizes;             // the call's blocks (encoded) and q's shape, checked on replay
  std::vector<bool> keep;                           // per block
  std::vector<std::function<torch::Tensor()>> out;  // per block: empty unless kept and not yet taken
  std::vector<BlockState> state;
};

namespace {
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
    auto* kept = current_keep ? &current_keep->next_call(flat, q, blocks) : nullptr;
    const bool replay = kept && current_keep->replaying();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const auto& b = blocks[i];
      BlockState st;
      torch::Tensor o;                // [B, N, len, Dh]
      if (replay && kept->keep[i]) {  // the forward's own result: this block's forward is not run again
        TORCH_CHECK(kept->out[i] != nullptr, "ranged_attention: kept block ", i, " was already taken");
        o = kept->out[i](), st = std::move(kept->state[i]);
        kept->out[i] = nullptr;  // lets go of what it held
      } else {
        o = block_forward(backend, q.narrow(2, b.begin, b.end - b.begin), gather_keys(k, b.keys),
                          gather_keys(v, b.keys), st);
        if (kept && !replay && kept->keep[i]) kept->out[i] = current_keep->keep(o), kept->state[i] = st;
      }
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
    // A block whose one key range is all of k (the prefix pattern's last chunk) runs first and hands over its key
    // gradients as the sums' start: no zero-filled start and one full-size add fewer per k and v (the sums then add
    // that block's part first, the others in block order).
    int64_t whole = -1;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i].keys.size() == 1 && blocks[i].keys[0] == std::pair<int64_t, int64_t>{0, k.size(2)}) whole = i;
    std::vector<int64_t> order;
    if (whole >= 0) order.push_back(whole);
    for (int64_t i = 0; i < static_cast<int64_t>(blocks.size()); ++i)
      if (i != whole) order.push_back(i);
    auto dq = torch::empty_like(q);
    torch::Tensor dk, dv;
    for (const int64_t i : order) {
      const auto& b = blocks[i];
      const int64_t len = b.end - b.begin;
      BlockState st{saved[4 + 5 * i], saved[5 + 5 * i], saved[6 + 5 * i], saved[7 + 5 * i],
                    saved[8 + 5 * i], maxes[2 * i],     maxes[2 * i + 1]};
      auto [gq, gk, gv] =
          block_backward(backend, g.narrow(2, b.begin, len), q.narrow(2, b.begin, len), gather_keys(k, b.keys),
                         gather_keys(v, b.keys), out.narrow(2, b.begin, len), st);
      dq.narrow(2, b.begin, len).copy_(gq);
      if (i == whole) {
        dk = gk, dv = gv;  // [B, N, Lk, Dh]: the backend's own, new tensors
        continue;
      }
      if (!dk.defined()) dk = torch::zeros_like(k), dv = torch::zeros_like(v);
      scatter_keys(dk, gk, b.keys);
      scatter_keys(dv, gv, b.keys);
    }
    return {dq, dk, dv, torch::Tensor()};
  }
};
}  // namespace

std::vector<size_t> blocks_to_keep(const std::vector<QueryBlock>& blocks, double fraction) {
  auto keys = [&](size_t i) {
    int64_t n = 0;
    for (const auto& [k0, k1] : blocks[i].keys) n += k1 - k0;
    return n;
  };
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys(a) > keys(b); });
  const double budget = fraction * static_cast<double>(blocks.empty() ? 0 : blocks.back().end - blocks.front().begin);
  std::vector<size_t> out;
  int64_t taken = 0;
  for (const size_t i : order) {
    const int64_t len = blocks[i].end - blocks[i].begin;
    if (static_cast<double>(taken + len) <= budget) out.push_back(i), taken += len;
  }
  std::sort(out.begin(), out.end());
  return out;
}

RangedAttentionKeep::RangedAttentionKeep(double fraction, Stash stash) : fraction_(fraction), stash_(std::move(stash)) {
  VDT_CHECK(fraction > 0 && fraction <= 1, "--attn-keep ", fraction, ": expected a share of the query rows in (0, 1]");
}
RangedAttentionKeep::~RangedAttentionKeep() = default;

std::function<torch::Tensor()> RangedAttentionKeep::keep(const torch::Tensor& out) const {
  if (stash_) return stash_(out);
  return [out] { return out; };
}

void RangedAttentionKeep::replay() { replaying_ = true, next_ = 0; }

void RangedAttentionKeep::check_done() const {
  VDT_CHECK(!replaying_ || next_ == calls_.size(), "--attn-keep: the block's recompute made ", next_,
            " ranged attention", " calls, its forward ", calls_.size(), "; a block must run the same ops both times");
}

RangedAttentionKeep::Call& RangedAttentionKeep::next_call(const std::vector<int64_t>& layout, const torch::Tensor& q,
                                                          const std::vector<QueryBlock>& blocks) {
  if (!replaying_) {
    auto c = std::make_unique<Call>();
    c->layout = layout, c->q_sizes = q.sizes().vec();
    c->keep.assign(blocks.size(), false);
    for (const size_t i : blocks_to_keep(blocks, fraction_)) c->keep[i] = true;
    c->out.resize(blocks.size()), c->state.resize(blocks.size());
    calls_.push_back(std::move(c));
    return *calls_.back();
  }
  VDT_CHECK(next_ < calls_.size(),
            "--attn-keep: the block's recompute made more ranged attention calls than its "
            "forward (",
            calls_.size(), "); a block must run the same ops both times");
  auto& c = *calls_[next_++];
  VDT_CHECK(c.layout == layout && c.q_sizes == q.sizes().vec(), "--attn-keep: ranged attention call ", next_,
            " of the recompute has q ", q.sizes(), " over ", blocks.size(), " query blocks, unlike its forward's (q ",
            c10::IntArrayRef(c.q_sizes), "); a block must run the same ops both times");
  return c;
}

RangedAttentionKeepScope::RangedAttentionKeepScope(RangedAttentionKeep* keep) : ThreadSlotScope(current_keep, keep) {}

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
