// H3 attention (docs/h3_model.md §1.3 step 4, §1.7) under its checkpoint names: fused `qkv_proj` with rows per head
// [q | k | v], per-head RMSNorm `q_norm`/`k_norm` before RoPE, partial rotate-half RoPE over the first 6*rope_len
// head channels, attention over packed segments (cu_seqlens: no row sees another segment), `out_proj`.
// Also the 3-axis RoPE table from float positions and which rows see which: packed segments, or block-causal chunks
// (h3_causal.h builds those) run as one kernel call per query block (prefix) or one masked call (mask).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <vector>

#include "model/attention.h"
#include "model/ranged_attention.h"

namespace vdt {

// Every Linear of the H3 modules is made by h3_linear: torch's (default init on the host), or, inside an H3FastBuild
// scope (H3BuildOptions::init false), zeros allocated straight on the scope's device and dtype, skipping the serial
// host init that init_weights or a load overwrites anyway (minutes for the 33B model).
torch::nn::Linear h3_linear(int64_t in, int64_t out, bool bias = true);
class H3FastBuild {
 public:
  H3FastBuild(torch::Device device, torch::ScalarType dtype);
  ~H3FastBuild();
  H3FastBuild(const H3FastBuild&) = delete;
  H3FastBuild& operator=(const H3FastBuild&) = delete;
};

// cos/sin of the rotary angles, [S, 6R] float32: per row [t(R) | h(R) | w(R)] twice.
struct H3RopeTable {
  torch::Tensor cos, sin;
};
// positions [S, 3] (any float dtype; cast to float32 as the reference does) -> table. inv_freq is recomputed as
// 1/10000^(i/R) in float32 (the checkpoint's stored rope.inv_freq is never read by the reference).
H3RopeTable h3_rope_table(const torch::Tensor& positions, int64_t rope_len);
// x [S, N, Dh] -> [S, N, Dh]: channels [0, 6R) rotated as rotate-half (d pairs with d + 3R), the rest unchanged.
// (H3Attention runs it inside the fused q/k node, model/kernels/qk_norm_rope.h.)
torch::Tensor h3_apply_rope(const torch::Tensor& x, const H3RopeTable& rope);

// Which rows see which: query blocks (in row order, covering [0, S)), each with the key ranges its rows attend to.
// Packed segments are blocks that see themselves; a block-causal chunk sees the prefix and the chunks before it.
using H3QueryBlock = QueryBlock;  // query rows [begin, end), key ranges [first, second), ascending, disjoint
struct H3AttentionLayout {
  std::vector<H3QueryBlock> blocks;
  torch::Tensor mask;  // optional [S, S] bool (true = attend), the same rule for one masked kernel call (mask())
  // Each segment {0, b1, ..., S} attends to itself only (empty segments skipped); throws unless bounds run 0..S.
  static H3AttentionLayout segments(const std::vector<int64_t>& bounds, int64_t S);
  bool segments_only() const;  // every block sees exactly itself
  // The rule as a dense mask [S, S] on `device`.
  torch::Tensor dense_mask(int64_t S, torch::Device device) const;
};

// Attention under a layout: q/k/v [S, N, Dh] -> [S, N, Dh]. With layout.mask defined and the sdpa kernel, one call
// with the mask; otherwise one call per query block on its keys: with sdpa and a fused backend, all blocks in one
// autograd node (ranged_attention); else (eager, or `per_block_autograd`, the reference) each block through autograd
// on its keys (a view when they are one range).
torch::Tensor layout_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const H3AttentionLayout& layout, AttentionKernel kernel,
                               bool per_block_autograd = false);
// Attention within segments {0, b1, ..., S} (the reference's varlen loop): layout_attention over segments().
torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const std::vector<int64_t>& bounds, AttentionKernel kernel);

class H3AttentionImpl : public torch::nn::Module {
 public:
  H3AttentionImpl(int64_t dim, int64_t heads, int64_t head_dim, double qk_eps);
  // x [S, D], rope table or nullptr (token refiner), which rows see which -> [S, D]. With a stream's cache (kv): the
  // rows attend to the cache and themselves (model/kv_cache.h); the layout is unused.
  torch::Tensor forward(const torch::Tensor& x, const H3RopeTable* rope, const H3AttentionLayout& layout,
                        KvSlot kv = {});
  torch::nn::Linear qkv_proj{nullptr}, out_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  AttentionKernel kernel = AttentionKernel::sdpa;

 private:
  int64_t heads_, head_dim_;
  double qk_eps_;
};
TORCH_MODULE(H3Attention);

}  // namespace vdt
