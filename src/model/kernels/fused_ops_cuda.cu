// CUDA kernels of fused_ops.h. Correctness first: one thread block per token row for the row-wise ops (LayerNorm
// statistics by a warp-shuffle + shared-memory block reduction in fp32, two passes: mean, then centred variance),
// 16-byte vector loads when the width and the pointers allow, one thread per column for the sums over a modulation
// row's tokens (deterministic: fixed partial sums, then one ATen sum; no atomics). Every intermediate is rounded to
// the dtype the reference op would have produced (`rnd<T>`), so the forward matches reference_ops.cpp.
// Built for TORCH_CUDA_ARCH_LIST / VDT_CUDA_ARCHITECTURES (default 90a: H100/H200).
#include "model/kernels/fused_ops_cuda.h"
#include "core/cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <type_traits>
#include <vector>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
using bf16 = c10::BFloat16;
constexpr int kRowThreads = 256;  // threads per block of the row kernels (a multiple of 32)
constexpr int kColThreads = 256;  // columns per block of the group sums

using cuda_common::block_sum, cuda_common::load, cuda_common::rnd, cuda_common::store;

// Token row -> modulation row. Wan: x [B, L, D] against [B, G, 1, D] (groups of L/G consecutive tokens); H3: an index.
struct GroupRows {
  int64_t L, Lg, G;
  __device__ __forceinline__ int64_t operator()(int64_t i) const { return (i / L) * G + (i % L) / Lg; }
};
struct IndexRows {
  const int64_t* rows;
  int64_t R;
  __device__ __forceinline__ int64_t operator()(int64_t i) const {
    const int64_t r = rows[i];
    CUDA_KERNEL_ASSERT(r >= 0 && r < R);
    return r;
  }
};

// ---- kernels -------------------------------------------------------------------------------------------------------

// Wan: h = LN(x) in X, out = shift + h * (1 + scale) in float32, then X. One block per token row.
template <typename X, int N>
__global__ void norm_modulate_kernel(const X* __restrict__ x, const float* __restrict__ shift,
                                     const float* __restrict__ scale, X* __restrict__ out, float* __restrict__ mean_out,
                                     float* __restrict__ rstd_out, int64_t D, GroupRows map, float eps) {
  const int64_t row = blockIdx.x;
  const X* xr = x + row * D;
  float s = 0.f;
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N];
    load<N>(xr + i, v);
#pragma unroll
    for (int k = 0; k < N; ++k) s += v[k];
  }
  const float mean = block_sum(s) / static_cast<float>(D);
  float q = 0.f;
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N];
    load<N>(xr + i, v);
#pragma unroll
    for (int k = 0; k < N; ++k) q += (v[k] - mean) * (v[k] - mean);
  }
  const float rstd = rsqrtf(block_sum(q) / static_cast<float>(D) + eps);
  const int64_t m = map(row);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N], sh[N], sc[N], o[N];
    load<N>(xr + i, v);
    load<N>(shift + m * D + i, sh);
    load<N>(scale + m * D + i, sc);
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = sh[k] + rnd<X>((v[k] - mean) * rstd) * (1.f + sc[k]);
    store<N>(out + row * D + i, o);
  }
  if (threadIdx.x == 0) mean_out[row] = mean, rstd_out[row] = rstd;
}

// Wan: dx of LN + modulate. dn = g * (1 + scale); dx = rstd * (dn - mean(dn) - n * mean(dn * n)).
template <typename X, int N>
__global__ void norm_backward_kernel(const X* __restrict__ go, const X* __restrict__ x, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, const float* __restrict__ scale,
                                     X* __restrict__ dx, int64_t D, GroupRows map) {
  const int64_t row = blockIdx.x;
  const float mu = mean[row], rs = rstd[row];
  const int64_t m = map(row);
  float a = 0.f, b = 0.f;
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float g[N], v[N], sc[N];
    load<N>(go + row * D + i, g);
    load<N>(x + row * D + i, v);
    load<N>(scale + m * D + i, sc);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float dn = g[k] * (1.f + sc[k]);
      a += dn;
      b += dn * (v[k] - mu) * rs;
    }
  }
  const float mean_dn = block_sum(a) / static_cast<float>(D), mean_dnn = block_sum(b) / static_cast<float>(D);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float g[N], v[N], sc[N], o[N];
    load<N>(go + row * D + i, g);
    load<N>(x + row * D + i, v);
    load<N>(scale + m * D + i, sc);
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = rs * (g[k] * (1.f + sc[k]) - mean_dn - (v[k] - mu) * rs * mean_dnn);
    store<N>(dx + row * D + i, o);
  }
}

// Gate + residual: out = x + gate[m] * y. Wan rounds the product to X (its `.to(x's dtype)`); H3 rounds it to the
// promoted dtype (X when the gate is X, else float32: no rounding). One block per token row.
template <typename X, typename M, bool kRoundProduct, int N, class Map>
__global__ void gate_kernel(const X* __restrict__ x, const M* __restrict__ gate, const X* __restrict__ y,
                            X* __restrict__ out, int64_t D, Map map) {
  const int64_t row = blockIdx.x, m = map(row);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float xv[N], gv[N], yv[N], o[N];
    load<N>(x + row * D + i, xv);
    load<N>(gate + m * D + i, gv);
    load<N>(y + row * D + i, yv);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float p = gv[k] * yv[k];
      if constexpr (kRoundProduct) p = rnd<X>(p);
      o[k] = xv[k] + p;
    }
    store<N>(out + row * D + i, o);
  }
}

// H3 modulate: s1 = 1 + scale rounded to M; out = x * s1 + shift, each step rounded to X when M is X (the reference's
// bf16 ops), in float32 otherwise. One block per token row.
template <typename X, typename M, int N>
__global__ void modulate_kernel(const X* __restrict__ x, const M* __restrict__ shift, const M* __restrict__ scale,
                                X* __restrict__ out, int64_t D, IndexRows map) {
  constexpr bool kSame = std::is_same_v<X, M>;
  const int64_t row = blockIdx.x, m = map(row);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float xv[N], sh[N], sc[N], o[N];
    load<N>(x + row * D + i, xv);
    load<N>(shift + m * D + i, sh);
    load<N>(scale + m * D + i, sc);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float p = xv[k] * rnd<M>(1.f + sc[k]);
      if constexpr (kSame) p = rnd<X>(p);
      o[k] = p + sh[k];
    }
    store<N>(out + row * D + i, o);
  }
}

// Backward of a per-row scale: out = g * f(mod[m]) in float32, stored in O; f = 1 + mod rounded to M, or mod.
template <typename X, typename M, typename O, bool kOnePlus, int N, class Map>
__global__ void scale_kernel(const X* __restrict__ go, const M* __restrict__ mod, O* __restrict__ out, int64_t D,
                             Map map) {
  const int64_t row = blockIdx.x, m = map(row);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float g[N], f[N], o[N];
    load<N>(go + row * D + i, g);
    load<N>(mod + m * D + i, f);
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = g[k] * (kOnePlus ? rnd<M>(1.f + f[k]) : f[k]);
    store<N>(out + row * D + i, o);
  }
}

// Wan: partial sums over a slice of one group's consecutive tokens, one thread per column d:
// grid (segments * splits, column tiles); prod[(seg * splits + split) * D + d] = sum g * h (h = LN(x) rounded to X when kNorm, else other), plain = sum g.
template <typename X, bool kNorm>
__global__ void group_sums_kernel(const X* __restrict__ go, const X* __restrict__ other, const float* __restrict__ mean,
                                  const float* __restrict__ rstd, float* __restrict__ prod, float* __restrict__ plain,
                                  int64_t D, int64_t Lg, int64_t splits, int64_t rows_per_split) {
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  const int64_t slice = blockIdx.x, seg = slice / splits, split = slice % splits;
  const int64_t r0 = seg * Lg + split * rows_per_split, r1 = min(r0 + rows_per_split, (seg + 1) * Lg);
  float acc = 0.f, acc_plain = 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = static_cast<float>(go[r * D + d]);
    float o = static_cast<float>(other[r * D + d]);
    if constexpr (kNorm) o = rnd<X>((o - mean[r]) * rstd[r]);
    acc += g * o;
    acc_plain += g;
  }
  prod[slice * D + d] = acc;
  if (plain) plain[slice * D + d] = acc_plain;
}

// H3: partial sums over a chunk of tokens with arbitrary rows, one thread per column of a tile, accumulators for
// every row in shared memory (each thread owns its column's slots: no races, no atomics).
// prod[(chunk * R + r) * D + d] = sum over the chunk's tokens of row r of g * other; plain = sum g.
template <typename X>
__global__ void row_sums_kernel(const X* __restrict__ go, const X* __restrict__ other, const int64_t* __restrict__ rows,
                                float* __restrict__ prod, float* __restrict__ plain, int64_t S, int64_t D, int64_t R,
                                int64_t rows_per_chunk) {
  extern __shared__ float acc[];  // [R][blockDim] (+ [R][blockDim] for plain)
  const int t = threadIdx.x, tile = blockDim.x;
  float* acc_plain = acc + R * tile;
  for (int64_t r = 0; r < R; ++r) {
    acc[r * tile + t] = 0.f;
    if (plain) acc_plain[r * tile + t] = 0.f;
  }
  const int64_t d = static_cast<int64_t>(blockIdx.x) * tile + t;
  const int64_t s0 = blockIdx.y * rows_per_chunk, s1 = min(s0 + rows_per_chunk, S);
  if (d < D) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t r = rows[s];
      CUDA_KERNEL_ASSERT(r >= 0 && r < R);
      const float g = static_cast<float>(go[s * D + d]);
      acc[r * tile + t] += g * static_cast<float>(other[s * D + d]);
      if (plain) acc_plain[r * tile + t] += g;
    }
    for (int64_t r = 0; r < R; ++r) {
      prod[(blockIdx.y * R + r) * D + d] = acc[r * tile + t];
      if (plain) plain[(blockIdx.y * R + r) * D + d] = acc_plain[r * tile + t];
    }
  }
}

// ---- host side -----------------------------------------------------------------------------------------------------

int64_t row_blocks(int64_t rows) {
  TORCH_CHECK(rows < (int64_t{1} << 31), "vdt fused kernels: ", rows, " token rows exceed one grid");
  return rows;
}

// Vector width for X-typed rows of width D: 16 bytes when D and every pointer allow, else 1.
template <typename X>
int vec_width(int64_t D, std::initializer_list<const void*> ptrs, std::initializer_list<size_t> elem_sizes) {
  constexpr int n = 16 / sizeof(X);
  if (D % n != 0) return 1;
  auto size = elem_sizes.begin();
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % (n * *size) != 0) return 1;
    ++size;
  }
  return n;
}

GroupRows group_rows(const Tensor& x, int64_t G) {
  const int64_t L = x.size(1);
  return GroupRows{L, L / G, G};
}

#define VDT_DISPATCH_X(t, name, ...)                                                                          \
  [&] {                                                                                                       \
    if ((t).scalar_type() == at::kFloat) {                                                                    \
      using X = float;                                                                                        \
      return __VA_ARGS__();                                                                                   \
    }                                                                                                         \
    TORCH_CHECK((t).scalar_type() == at::kBFloat16, name, ": the CUDA kernels take float32 or bfloat16, got ", \
                (t).scalar_type());                                                                           \
    using X = bf16;                                                                                           \
    return __VA_ARGS__();                                                                                     \
  }()

void check_launch() { C10_CUDA_KERNEL_LAUNCH_CHECK(); }

}  // namespace

bool device_supported(int device_index) { return cuda_common::image_fits(device_index, norm_modulate_kernel<float, 1>); }

std::tuple<Tensor, Tensor, Tensor> modulated_norm_forward(const Tensor& x_in, const Tensor& shift_in,
                                                          const Tensor& scale_in, double eps) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous();
  const auto shift = shift_in.to(at::kFloat).contiguous(), scale = scale_in.to(at::kFloat).contiguous();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = shift.size(1);
  auto out = at::empty_like(x);
  auto mean = at::empty({B * L}, x.options().dtype(at::kFloat)), rstd = at::empty_like(mean);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(x, "modulated_norm", [&] {
    const int n = vec_width<X>(D, {x.data_ptr(), out.data_ptr(), shift.data_ptr(), scale.data_ptr()},
                               {sizeof(X), sizeof(X), sizeof(float), sizeof(float)});
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(B * L), kRowThreads, 0, stream>>>(x.data_ptr<X>(), shift.data_ptr<float>(),
                                                            scale.data_ptr<float>(), out.data_ptr<X>(),
                                                            mean.data_ptr<float>(), rstd.data_ptr<float>(), D,
                                                            group_rows(x, G), static_cast<float>(eps));
    };
    if (n > 1) launch(norm_modulate_kernel<X, 16 / sizeof(X)>);
    else launch(norm_modulate_kernel<X, 1>);
  });
  check_launch();
  return {out, mean, rstd};
}

Tensor modulated_norm_backward_x(const Tensor& go, const Tensor& x_in, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& scale_in) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), g = go.to(x.scalar_type()).contiguous();
  const auto scale = scale_in.to(at::kFloat).contiguous();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = scale.size(1);
  auto dx = at::empty_like(x);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(x, "modulated_norm backward", [&] {
    const int n = vec_width<X>(D, {x.data_ptr(), g.data_ptr(), dx.data_ptr(), scale.data_ptr()},
                               {sizeof(X), sizeof(X), sizeof(X), sizeof(float)});
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(B * L), kRowThreads, 0, stream>>>(g.data_ptr<X>(), x.data_ptr<X>(), mean.data_ptr<float>(),
                                                            rstd.data_ptr<float>(), scale.data_ptr<float>(),
                                                            dx.data_ptr<X>(), D, group_rows(x, G));
    };
    if (n > 1) launch(norm_backward_kernel<X, 16 / sizeof(X)>);
    else launch(norm_backward_kernel<X, 1>);
  });
  check_launch();
  return dx;
}

std::tuple<Tensor, Tensor> group_sums(const Tensor& go, const Tensor& other_in, const Tensor& mean, const Tensor& rstd,
                                      int64_t G, bool norm, bool want_plain) {
  c10::cuda::CUDAGuard guard(go.device());
  const auto other = other_in.contiguous(), g = go.to(other.scalar_type()).contiguous();
  const int64_t B = other.size(0), L = other.size(1), D = other.size(2), Lg = L / G;
  // Slices of at least 64 tokens (at most 256 per group) so that the blocks fill the GPU.
  const int64_t rows_per_split = std::max<int64_t>(64, (Lg + 255) / 256), splits = (Lg + rows_per_split - 1) / rows_per_split;
  auto prod = at::empty({B, G, splits, D}, g.options().dtype(at::kFloat));
  auto plain = want_plain ? at::empty_like(prod) : Tensor();
  const dim3 grid(row_blocks(B * G * splits), (D + kColThreads - 1) / kColThreads);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(other, "group_sums", [&] {
    float* pp = want_plain ? plain.data_ptr<float>() : nullptr;
    if (norm)
      group_sums_kernel<X, true><<<grid, kColThreads, 0, stream>>>(g.data_ptr<X>(), other.data_ptr<X>(),
                                                                   mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                                                   prod.data_ptr<float>(), pp, D, Lg, splits,
                                                                   rows_per_split);
    else
      group_sums_kernel<X, false><<<grid, kColThreads, 0, stream>>>(g.data_ptr<X>(), other.data_ptr<X>(), nullptr,
                                                                    nullptr, prod.data_ptr<float>(), pp, D, Lg, splits,
                                                                    rows_per_split);
  });
  check_launch();
  // [B, G, splits, D] -> [B, G, 1, D]
  return {prod.sum(2, /*keepdim=*/true), want_plain ? plain.sum(2, /*keepdim=*/true) : Tensor()};
}

Tensor gated_add_forward(const Tensor& x_in, const Tensor& y_in, const Tensor& gate_in) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), y = y_in.contiguous(), gate = gate_in.to(at::kFloat).contiguous();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = gate.size(1);
  auto out = at::empty_like(x);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(x, "gated_add", [&] {
    const int n = vec_width<X>(D, {x.data_ptr(), y.data_ptr(), out.data_ptr(), gate.data_ptr()},
                               {sizeof(X), sizeof(X), sizeof(X), sizeof(float)});
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(B * L), kRowThreads, 0, stream>>>(x.data_ptr<X>(), gate.data_ptr<float>(), y.data_ptr<X>(),
                                                            out.data_ptr<X>(), D, group_rows(x, G));
    };
    if (n > 1) launch(gate_kernel<X, float, true, 16 / sizeof(X), GroupRows>);
    else launch(gate_kernel<X, float, true, 1, GroupRows>);
  });
  check_launch();
  return out;
}

Tensor group_scale(const Tensor& go, const Tensor& gate_in, at::ScalarType dtype) {
  c10::cuda::CUDAGuard guard(go.device());
  const auto g = go.to(dtype).contiguous(), gate = gate_in.to(at::kFloat).contiguous();
  const int64_t B = g.size(0), L = g.size(1), D = g.size(2), G = gate.size(1);
  auto out = at::empty_like(g);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(g, "gated_add backward", [&] {
    const int n = vec_width<X>(D, {g.data_ptr(), out.data_ptr(), gate.data_ptr()},
                               {sizeof(X), sizeof(X), sizeof(float)});
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(B * L), kRowThreads, 0, stream>>>(g.data_ptr<X>(), gate.data_ptr<float>(), out.data_ptr<X>(),
                                                            D, group_rows(g, G));
    };
    if (n > 1) launch(scale_kernel<X, float, X, false, 16 / sizeof(X), GroupRows>);
    else launch(scale_kernel<X, float, X, false, 1, GroupRows>);
  });
  check_launch();
  return out;
}

namespace {
// Runs f.template operator()<M>() with M = float or X, matching mod's dtype.
template <typename X, class F>
void dispatch_mod(const Tensor& mod, const char* name, F&& f) {
  if (mod.scalar_type() == at::kFloat) return f(float{});
  TORCH_CHECK(mod.scalar_type() == c10::CppTypeToScalarType<X>::value, name, ": modulation ", mod.scalar_type(),
              " must be float32 or the activations' dtype");
  f(X{});
}
}  // namespace

Tensor h3_modulate_forward(const Tensor& x_in, const Tensor& shift_in, const Tensor& scale_in, const Tensor& rows) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), shift = shift_in.contiguous(), scale = scale_in.contiguous(), r = rows.contiguous();
  const int64_t S = x.size(0), D = x.size(1);
  auto out = at::empty_like(x);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const IndexRows map{r.data_ptr<int64_t>(), shift.size(0)};
  VDT_DISPATCH_X(x, "h3_modulate", [&] {
    dispatch_mod<X>(shift, "h3_modulate", [&](auto m) {
      using M = decltype(m);
      const int n = vec_width<X>(D, {x.data_ptr(), out.data_ptr(), shift.data_ptr(), scale.data_ptr()},
                                 {sizeof(X), sizeof(X), sizeof(M), sizeof(M)});
      auto launch = [&](auto kernel) {
        kernel<<<row_blocks(S), kRowThreads, 0, stream>>>(x.data_ptr<X>(), shift.data_ptr<M>(), scale.data_ptr<M>(),
                                                          out.data_ptr<X>(), D, map);
      };
      if (n > 1) launch(modulate_kernel<X, M, 16 / sizeof(X)>);
      else launch(modulate_kernel<X, M, 1>);
    });
  });
  check_launch();
  return out;
}

Tensor h3_gate_forward(const Tensor& x_in, const Tensor& gate_in, const Tensor& y_in, const Tensor& rows) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), gate = gate_in.contiguous(), y = y_in.contiguous(), r = rows.contiguous();
  const int64_t S = x.size(0), D = x.size(1);
  auto out = at::empty_like(x);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const IndexRows map{r.data_ptr<int64_t>(), gate.size(0)};
  VDT_DISPATCH_X(x, "h3_gate", [&] {
    dispatch_mod<X>(gate, "h3_gate", [&](auto m) {
      using M = decltype(m);
      constexpr bool kRound = std::is_same_v<X, M>;  // the product is rounded to the promoted dtype
      const int n = vec_width<X>(D, {x.data_ptr(), y.data_ptr(), out.data_ptr(), gate.data_ptr()},
                                 {sizeof(X), sizeof(X), sizeof(X), sizeof(M)});
      auto launch = [&](auto kernel) {
        kernel<<<row_blocks(S), kRowThreads, 0, stream>>>(x.data_ptr<X>(), gate.data_ptr<M>(), y.data_ptr<X>(),
                                                          out.data_ptr<X>(), D, map);
      };
      if (n > 1) launch(gate_kernel<X, M, kRound, 16 / sizeof(X), IndexRows>);
      else launch(gate_kernel<X, M, kRound, 1, IndexRows>);
    });
  });
  check_launch();
  return out;
}

Tensor rows_scale(const Tensor& go, const Tensor& mod_in, const Tensor& rows, bool one_plus, at::ScalarType dtype) {
  c10::cuda::CUDAGuard guard(go.device());
  const auto g = go.to(dtype).contiguous(), mod = mod_in.contiguous(), r = rows.contiguous();
  const int64_t S = g.size(0), D = g.size(1);
  auto out = at::empty_like(g);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const IndexRows map{r.data_ptr<int64_t>(), mod.size(0)};
  VDT_DISPATCH_X(g, "h3 backward", [&] {
    dispatch_mod<X>(mod, "h3 backward", [&](auto m) {
      using M = decltype(m);
      const int n = vec_width<X>(D, {g.data_ptr(), out.data_ptr(), mod.data_ptr()}, {sizeof(X), sizeof(X), sizeof(M)});
      auto launch = [&](auto kernel) {
        kernel<<<row_blocks(S), kRowThreads, 0, stream>>>(g.data_ptr<X>(), mod.data_ptr<M>(), out.data_ptr<X>(), D,
                                                          map);
      };
      if (one_plus) {
        if (n > 1) launch(scale_kernel<X, M, X, true, 16 / sizeof(X), IndexRows>);
        else launch(scale_kernel<X, M, X, true, 1, IndexRows>);
      } else {
        if (n > 1) launch(scale_kernel<X, M, X, false, 16 / sizeof(X), IndexRows>);
        else launch(scale_kernel<X, M, X, false, 1, IndexRows>);
      }
    });
  });
  check_launch();
  return out;
}

std::tuple<Tensor, Tensor> row_sums(const Tensor& go, const Tensor& other_in, const Tensor& rows, int64_t R,
                                    bool want_plain) {
  c10::cuda::CUDAGuard guard(go.device());
  const auto other = other_in.contiguous(), g = go.to(other.scalar_type()).contiguous(), r = rows.contiguous();
  const int64_t S = other.size(0), D = other.size(1);
  // Shared accumulators: R rows x tile columns (x2 with plain) within 48 KiB; tiles of 128 down to 32 columns.
  const int64_t per_col = (want_plain ? 2 : 1) * R * static_cast<int64_t>(sizeof(float));
  int tile = 128;
  while (tile > 32 && per_col * tile > 48 * 1024) tile /= 2;
  if (per_col * tile > 48 * 1024 || S == 0) {  // many rows: ATen's index_add (float32), still exact sums
    auto gf = g.to(at::kFloat);
    auto prod = at::zeros({R, D}, gf.options()).index_add_(0, r, gf * other.to(at::kFloat));
    return {prod, want_plain ? at::zeros({R, D}, gf.options()).index_add_(0, r, gf) : Tensor()};
  }
  const int64_t rows_per_chunk = std::max<int64_t>(128, (S + 63) / 64), chunks = (S + rows_per_chunk - 1) / rows_per_chunk;
  auto prod = at::empty({chunks, R, D}, g.options().dtype(at::kFloat));
  auto plain = want_plain ? at::empty_like(prod) : Tensor();
  const dim3 grid((D + tile - 1) / tile, chunks);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(other, "h3 row sums", [&] {
    row_sums_kernel<X><<<grid, tile, per_col * tile, stream>>>(g.data_ptr<X>(), other.data_ptr<X>(),
                                                               r.data_ptr<int64_t>(), prod.data_ptr<float>(),
                                                               want_plain ? plain.data_ptr<float>() : nullptr, S, D, R,
                                                               rows_per_chunk);
  });
  check_launch();
  return {prod.sum(0), want_plain ? plain.sum(0) : Tensor()};  // [chunks, R, D] -> [R, D]
}

}  // namespace vdt::kernels::cuda
