// Position and time encodings of the Wan DiT (docs/design.md §1): the sinusoidal timestep embedding
// (cos half first, computed in float64) and the interleaved 3-axis RoPE tables and their application.
// Not here: the learned time MLP (wan_dit) or attention itself (attention).
#pragma once
#include <torch/types.h>

#include <array>
#include <map>
#include <mutex>
#include <tuple>

namespace vdt {

// t: any shape [...] on the 0..1000 scale -> [..., freq_dim] in `dtype`; computed in float64 as the reference.
torch::Tensor sinusoidal_embedding(const torch::Tensor& t, int64_t freq_dim, torch::ScalarType dtype);

// Timesteps t [B] or [B, G] (on the host: the search for distinct values must not sync a device) as their distinct
// values `rows` [U] (float32, ascending) and the row of each entry `index` [B, G] int64 (t [B] as [B, 1]), so that
// rows.index_select(0, index.flatten()) equals t exactly.
struct TimestepRows {
  torch::Tensor rows, index;
};
TimestepRows distinct_timestep_rows(const torch::Tensor& t);

// RoPE rotation table for a token grid: cos and sin, each [L, Dh/2] float32 (angles computed in float64), token order
// (f, h, w) row-major. The frame axis takes the first Dh - 4*(Dh//6) real dims, height and width 2*(Dh//6) each
// (Dh 128: 22/21/21 complex pairs). frame_offset: the grid's frames start at that frame of a longer
// stream (streaming generation: a chunk at its place in the stream).
struct RopeTable {
  torch::Tensor cos, sin;  // [L, Dh/2]
};
RopeTable rope_table(int64_t head_dim, std::array<int64_t, 3> grid, const torch::Device& device,
                     int64_t frame_offset = 0);

// rope_table memoised per (grid, device, repeated): the tables of the grids a model has seen stay on their device
// instead of being rebuilt on the host every forward (at 8190 tokens ~5 ms of host work, during which a GPU idles).
// repeated: the table of the grid with F/2 frames, twice (teacher forcing's clean and noisy halves share positions).
// Holds at most kMaxTables grids (cleared when full). Thread-safe; values equal rope_table's exactly.
class RopeCache {
 public:
  static constexpr size_t kMaxTables = 16;
  explicit RopeCache(int64_t head_dim) : head_dim_(head_dim) {}
  RopeTable get(std::array<int64_t, 3> grid, const torch::Device& device, bool repeated = false);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, bool>;  // F, H, W, device type, index, repeated
  int64_t head_dim_;
  std::mutex mu_;
  std::map<Key, RopeTable> tables_;
};

// x: [B, L, N, Dh] -> [B, L, N, Dh], pairs (x[2j], x[2j+1]) rotated by the table; math in float32, result in x's dtype.
// One complex multiply (x viewed as Dh/2 complex pairs, times cos + i sin), as the official Wan code does.
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& rope);
// The same rotation written out on real pairs (the reference apply_rope is tested against).
torch::Tensor apply_rope_reference(const torch::Tensor& x, const RopeTable& rope);

}  // namespace vdt
