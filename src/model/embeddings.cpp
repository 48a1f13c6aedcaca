// Sinusoid and RoPE. Both follow the official Wan code's float64 computation; the RoPE multiply itself runs in
// float32 (the official path returns float32; DiffSynth's bf16 path rounds once more, within bf16 tolerance).
#include "model/embeddings.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

torch::Tensor sinusoidal_embedding(const torch::Tensor& t, int64_t freq_dim, torch::ScalarType dtype) {
  const int64_t half = freq_dim / 2;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(t.device());
  // omega_k = 10000^(-k/half)
  auto omega = torch::pow(10000.0, -torch::arange(half, opts) / static_cast<double>(half));
  auto angle = t.to(torch::kFloat64).unsqueeze(-1) * omega;  // [..., half]
  return torch::cat({torch::cos(angle), torch::sin(angle)}, -1).to(dtype);
}

TimestepRows distinct_timestep_rows(const torch::Tensor& t) {
  VDT_CHECK(t.dim() == 1 || t.dim() == 2, "timesteps: expected t [B] or [B, G], got ", t.sizes());
  VDT_CHECK(!t.is_cuda(), "timesteps: distinct rows are found on the host (a device search would sync); got t on ",
            t.device());
  auto t2 = (t.dim() == 1 ? t.unsqueeze(1) : t).to(torch::kFloat32);  // [B, G]
  auto [rows, inverse, counts] = at::_unique2(t2, /*sorted=*/true, /*return_inverse=*/true);
  return {rows, inverse.reshape(t2.sizes()).to(torch::kLong)};
}

RopeTable rope_table(int64_t head_dim, std::array<int64_t, 3> grid, const torch::Device& device, int64_t frame_offset) {
  VDT_CHECK(head_dim % 2 == 0, "rope: head dim ", head_dim, " must be even");
  const int64_t hw_dims = 2 * (head_dim / 6);
  const int64_t f_dims = head_dim - 2 * hw_dims;
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // Per-axis angles [positions, dims/2]: pos * 10000^(-2j/dims)
  auto axis = [&](int64_t n, int64_t dims, int64_t first = 0) {
    auto j = torch::arange(dims / 2, f64);
    auto omega = torch::pow(10000.0, -2.0 * j / static_cast<double>(dims));
    return torch::arange(first, first + n, f64).unsqueeze(1) * omega.unsqueeze(0);
  };
  const auto [F, H, W] = grid;
  auto af = axis(F, f_dims, frame_offset).view({F, 1, 1, -1}).expand({F, H, W, -1});
  auto ah = axis(H, hw_dims).view({1, H, 1, -1}).expand({F, H, W, -1});
  auto aw = axis(W, hw_dims).view({1, 1, W, -1}).expand({F, H, W, -1});
  auto angle = torch::cat({af, ah, aw}, -1).reshape({F * H * W, head_dim / 2});  // [L, Dh/2]
  return {torch::cos(angle).to(torch::kFloat32).to(device), torch::sin(angle).to(torch::kFloat32).to(device)};
}

RopeTable RopeCache::get(std::array<int64_t, 3> grid, const torch::Device& device, bool repeated) {
  const Key key{grid[0], grid[1], grid[2], static_cast<int>(device.type()), device.index(), repeated};
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = tables_.find(key); it != tables_.end()) return it->second;
  RopeTable t;
  if (repeated) {
    VDT_CHECK(grid[0] % 2 == 0, "rope: a repeated table needs an even frame count, got ", grid[0]);
    const auto half = rope_table(head_dim_, {grid[0] / 2, grid[1], grid[2]}, device);  // [L/2, Dh/2]
    t = {torch::cat({half.cos, half.cos}), torch::cat({half.sin, half.sin})};          // [L, Dh/2]
  } else {
    t = rope_table(head_dim_, grid, device);
  }
  if (tables_.size() >= kMaxTables) tables_.clear();
  return tables_.emplace(key, t).first->second;
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& rope) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == rope.cos.size(0) && x.size(3) == 2 * rope.cos.size(1),
              "apply_rope: expected x [B, L, N, Dh] with L = ", rope.cos.size(0), " and Dh = ", 2 * rope.cos.size(1),
              ", got ", x.sizes());
  auto xc = torch::view_as_complex(x.to(torch::kFloat32).unflatten(-1, {-1, 2}));  // [B, L, N, Dh/2] complex
  auto cis = torch::complex(rope.cos, rope.sin).unsqueeze(1);                      // [L, 1, Dh/2]
  return torch::view_as_real(xc * cis).flatten(-2).to(x.scalar_type());            // -> [B, L, N, Dh]
}

torch::Tensor apply_rope_reference(const torch::Tensor& x, const RopeTable& rope) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == rope.cos.size(0) && x.size(3) == 2 * rope.cos.size(1),
              "apply_rope: expected x [B, L, N, Dh] with L = ", rope.cos.size(0), " and Dh = ", 2 * rope.cos.size(1),
              ", got ", x.sizes());
  auto xf = x.to(torch::kFloat32).unflatten(-1, {-1, 2});           // [B, L, N, Dh] -> [B, L, N, Dh/2, 2]
  auto xr = xf.select(-1, 0), xi = xf.select(-1, 1);                // [B, L, N, Dh/2]
  auto c = rope.cos.unsqueeze(1), s = rope.sin.unsqueeze(1);        // [L, 1, Dh/2]
  auto out = torch::stack({xr * c - xi * s, xr * s + xi * c}, -1);  // [B, L, N, Dh/2, 2]
  return out.flatten(-2).to(x.scalar_type());                       // -> [B, L, N, Dh]
}

}  // namespace vdt
