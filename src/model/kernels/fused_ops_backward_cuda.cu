// CUDA kernels of fused_ops.h, the backwards (fused_ops_backward_cuda.h). The Wan backward runs over chunks of a
// modulation group's rows with each thread keeping its columns, so one pass over the gradient gives dx (or dy) and the
// modulation's column sums together (deterministic: fixed partial sums per chunk, then one ATen sum; no atomics); rows
// too wide for it take one block per row for dx and one thread per column for the sums, and H3's indexed rows one
// block per row and a shared-memory accumulator per row. Values as the reference ops' backward (reference_ops.cpp
// through autograd), in float32, rounded once to the gradient's dtype. The forwards: fused_ops_cuda.cu.
// Built for TORCH_CUDA_ARCH_LIST / VDT_CUDA_ARCHITECTURES (default 90a: H100/H200).
#include "model/kernels/fused_ops_backward_cuda.h"
#include "model/kernels/fused_ops_cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <utility>

namespace vdt::kernels::cuda {
namespace {

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
// grid (segments * splits, column tiles); prod[(seg * splits + split) * D + d] = sum g * h (h = LN(x) rounded to X when
// kNorm, else other), plain = sum g.
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

// ---- Wan backward over chunks of rows: each thread keeps its columns ------------------------------------------------
// Block (segment s, split k) takes the rows [s * Lg + k * per, min(s * Lg + (k + 1) * per, (s + 1) * Lg)): one chunk of
// modulation group s (row s of [B * G, D]). Thread t owns the V vectors t, t + T, ..., t + (V - 1) * T (N columns each,
// T = blockDim.x) of every row, so it adds its columns over the chunk in registers and writes them once:
// part[(s * splits + k) * D + column]. The host adds the splits (fixed order: deterministic).

constexpr int kStepRows = 2;  // rows per step of the norm backward: their row sums share one block reduction

// Wan LN + modulate, the whole backward in one pass over g and x: per row dn = g * (1 + scale),
// dx = rstd * (dn - mean(dn) - n * mean(dn * n)) (+ res, the residual stream's gradient of the same x, when given), and
// per column the chunk's sums of g * h (h = n rounded to X, as the forward) and g (when prod is given).
// kAffine: an affine LayerNorm (out = n * w + b in float32, rounded once) instead, `scale` = w [D] for every row:
// dn = g * w, sums of g * n and g.
template <typename X, int N, int V, bool kAffine>
__global__ void norm_backward_chunk_kernel(const X* __restrict__ go, const X* __restrict__ x, const X* __restrict__ res,
                                           const float* __restrict__ mean, const float* __restrict__ rstd,
                                           const float* __restrict__ scale, X* __restrict__ dx,
                                           float* __restrict__ prod, float* __restrict__ plain, int64_t D, int64_t Lg,
                                           int64_t splits, int64_t per) {
  __shared__ float part[2 * kStepRows][32];
  const int64_t seg = blockIdx.x / splits, split = blockIdx.x % splits;
  const int64_t r0 = seg * Lg + split * per, r1 = min(r0 + per, (seg + 1) * Lg);
  bool own[V];
  int64_t col[V];
  float s1[V][N], acc_p[V][N], acc_g[V][N];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    col[v] = (static_cast<int64_t>(threadIdx.x) + v * blockDim.x) * N;
    own[v] = col[v] < D;
    if (own[v]) load<N>(scale + (kAffine ? 0 : seg * D) + col[v], s1[v]);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      s1[v][k] = own[v] ? (kAffine ? s1[v][k] : 1.f + s1[v][k]) : 0.f;
      acc_p[v][k] = acc_g[v][k] = 0.f;
    }
  }
  for (int64_t r = r0; r < r1; r += kStepRows) {
    float g[kStepRows][V][N], n[kStepRows][V][N], rv[kStepRows][V][N], sums[2 * kStepRows];
    float rs[kStepRows];
#pragma unroll
    for (int j = 0; j < kStepRows; ++j) {
      const int64_t row = r + j;
      const bool valid = row < r1;
      const float mu = valid ? mean[row] : 0.f;
      rs[j] = valid ? rstd[row] : 0.f;
      sums[2 * j] = sums[2 * j + 1] = 0.f;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        if (valid && own[v]) {  // every load of the step before the reduction: one memory latency per step
          load<N>(go + row * D + col[v], g[j][v]);
          load<N>(x + row * D + col[v], n[j][v]);
          if (res) load<N>(res + row * D + col[v], rv[j][v]);
        }
#pragma unroll
        for (int k = 0; k < N; ++k) {
          if (!(valid && own[v])) g[j][v][k] = n[j][v][k] = 0.f;
          n[j][v][k] = (n[j][v][k] - mu) * rs[j];
          const float dn = g[j][v][k] * s1[v][k];
          sums[2 * j] += dn;
          sums[2 * j + 1] += dn * n[j][v][k];
        }
      }
    }
    cuda_common::block_sums<2 * kStepRows>(sums, part);
#pragma unroll
    for (int j = 0; j < kStepRows; ++j) {
      const int64_t row = r + j;
      if (row >= r1) continue;
      const float mean_dn = sums[2 * j] / static_cast<float>(D), mean_dnn = sums[2 * j + 1] / static_cast<float>(D);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        if (!own[v]) continue;
        float o[N];
#pragma unroll
        for (int k = 0; k < N; ++k) {
          o[k] = rs[j] * (g[j][v][k] * s1[v][k] - mean_dn - n[j][v][k] * mean_dnn);
          if (res) o[k] += rv[j][v][k];
          acc_p[v][k] += g[j][v][k] * (kAffine ? n[j][v][k] : rnd<X>(n[j][v][k]));
          acc_g[v][k] += g[j][v][k];
        }
        store<N>(dx + row * D + col[v], o);
      }
    }
  }
  if (!prod) return;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    if (!own[v]) continue;
    store<N>(prod + blockIdx.x * D + col[v], acc_p[v]);
    if (plain) store<N>(plain + blockIdx.x * D + col[v], acc_g[v]);
  }
}

constexpr int kGateUnroll = 2;  // rows in flight per thread in the gate backward

// Wan gate + residual backward in one pass over g and y: dy = g * gate (stored in X) and per column the chunk's sum of
// g * y (when prod is given).
template <typename X, int N, int V>
__global__ void gate_backward_chunk_kernel(const X* __restrict__ go, const X* __restrict__ y,
                                           const float* __restrict__ gate, X* __restrict__ dy, float* __restrict__ prod,
                                           int64_t D, int64_t Lg, int64_t splits, int64_t per) {
  const int64_t seg = blockIdx.x / splits, split = blockIdx.x % splits;
  const int64_t r0 = seg * Lg + split * per, r1 = min(r0 + per, (seg + 1) * Lg);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t c = (static_cast<int64_t>(threadIdx.x) + v * blockDim.x) * N;
    if (c >= D) continue;
    float gt[N], acc[N] = {};
    load<N>(gate + seg * D + c, gt);
    int64_t r = r0;
    for (; r + kGateUnroll <= r1; r += kGateUnroll) {
      float g[kGateUnroll][N], yv[kGateUnroll][N];
#pragma unroll
      for (int u = 0; u < kGateUnroll; ++u) {
        load<N>(go + (r + u) * D + c, g[u]);
        if (prod) load<N>(y + (r + u) * D + c, yv[u]);
      }
#pragma unroll
      for (int u = 0; u < kGateUnroll; ++u) {
        float o[N];
#pragma unroll
        for (int k = 0; k < N; ++k) {
          o[k] = g[u][k] * gt[k];
          if (prod) acc[k] += g[u][k] * yv[u][k];
        }
        if (dy) store<N>(dy + (r + u) * D + c, o);
      }
    }
    for (; r < r1; ++r) {
      float g[N], yv[N], o[N];
      load<N>(go + r * D + c, g);
      if (prod) load<N>(y + r * D + c, yv);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        o[k] = g[k] * gt[k];
        if (prod) acc[k] += g[k] * yv[k];
      }
      if (dy) store<N>(dy + r * D + c, o);
    }
    if (prod) store<N>(prod + blockIdx.x * D + c, acc);
  }
}

}  // namespace

namespace {

// The two-kernel backward of LN + modulate (one block per row for dx, one thread per column for the sums): rows too
// wide for the chunk kernels.
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
    if (n > 1)
      launch(norm_backward_kernel<X, 16 / sizeof(X)>);
    else
      launch(norm_backward_kernel<X, 1>);
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
  const int64_t rows_per_split = std::max<int64_t>(64, (Lg + 255) / 256),
                splits = (Lg + rows_per_split - 1) / rows_per_split;
  auto prod = at::empty({B, G, splits, D}, g.options().dtype(at::kFloat));
  auto plain = want_plain ? at::empty_like(prod) : Tensor();
  const dim3 grid(row_blocks(B * G * splits), (D + kColThreads - 1) / kColThreads);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(other, "group_sums", [&] {
    float* pp = want_plain ? plain.data_ptr<float>() : nullptr;
    if (norm)
      group_sums_kernel<X, true><<<grid, kColThreads, 0, stream>>>(
          g.data_ptr<X>(), other.data_ptr<X>(), mean.data_ptr<float>(), rstd.data_ptr<float>(), prod.data_ptr<float>(),
          pp, D, Lg, splits, rows_per_split);
    else
      group_sums_kernel<X, false><<<grid, kColThreads, 0, stream>>>(g.data_ptr<X>(), other.data_ptr<X>(), nullptr,
                                                                    nullptr, prod.data_ptr<float>(), pp, D, Lg, splits,
                                                                    rows_per_split);
  });
  check_launch();
  // [B, G, splits, D] -> [B, G, 1, D]
  return {prod.sum(2, /*keepdim=*/true), want_plain ? plain.sum(2, /*keepdim=*/true) : Tensor()};
}

}  // namespace

namespace {

// (go * gate).to(dtype), one block per row: the fallback of gated_add_backward.
Tensor group_scale(const Tensor& go, const Tensor& gate_in, at::ScalarType dtype) {
  c10::cuda::CUDAGuard guard(go.device());
  const auto g = go.to(dtype).contiguous(), gate = gate_in.to(at::kFloat).contiguous();
  const int64_t B = g.size(0), L = g.size(1), D = g.size(2), G = gate.size(1);
  auto out = at::empty_like(g);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(g, "gated_add backward", [&] {
    const int n =
        vec_width<X>(D, {g.data_ptr(), out.data_ptr(), gate.data_ptr()}, {sizeof(X), sizeof(X), sizeof(float)});
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(B * L), kRowThreads, 0, stream>>>(g.data_ptr<X>(), gate.data_ptr<float>(), out.data_ptr<X>(),
                                                            D, group_rows(g, G));
    };
    if (n > 1)
      launch(scale_kernel<X, float, X, false, 16 / sizeof(X), GroupRows>);
    else
      launch(scale_kernel<X, float, X, false, 1, GroupRows>);
  });
  check_launch();
  return out;
}

// The largest block `kernel` runs with (its registers per thread bound it), read once per kernel and device.
int max_block_of(const void* kernel) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> known;
  const std::pair<const void*, int> key{kernel, c10::cuda::current_device()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  cudaFuncAttributes attr;
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  return known[key] = attr.maxThreadsPerBlock;
}

// The same for the two kernels (V = 1, 2) a chunk grid picks from.
template <typename Kernel>
std::array<int, 2> max_blocks(Kernel* k1, Kernel* k2) {
  return {max_block_of(reinterpret_cast<const void*>(k1)), max_block_of(reinterpret_cast<const void*>(k2))};
}

// Geometry of a chunk kernel for rows of D columns in vectors of n: T threads owning V vectors each (V = 1, else 2;
// T at most 512 and at most what the kernel's registers allow: max_block[V - 1]), each of the `segments` groups' Lg
// rows cut into `splits` chunks of `per` rows (~3 blocks per SM in all). False when a row is too wide for it.
struct ChunkGrid {
  int threads = 0, V = 0;
  int64_t splits = 0, per = 0;
};

bool chunk_grid(int64_t D, int n, int64_t segments, int64_t Lg, const std::array<int, 2>& max_block, ChunkGrid& grid) {
  const int64_t vectors = (D + n - 1) / n;
  for (int V : {1, 2}) {
    const int64_t T = ((vectors + V - 1) / V + 31) / 32 * 32;
    if (T <= std::min(512, max_block[V - 1])) {
      grid.threads = static_cast<int>(T), grid.V = V;
      break;
    }
  }
  if (grid.V == 0) return false;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t per = std::max<int64_t>(8, (segments * Lg + 3 * sms - 1) / (3 * sms));
  grid.splits = (Lg + per - 1) / per;
  grid.per = (Lg + grid.splits - 1) / grid.splits;  // even chunks
  return row_blocks(segments * grid.splits) > 0;
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> modulated_norm_backward(const Tensor& go, const Tensor& x_in, const Tensor& mean,
                                                           const Tensor& rstd, const Tensor& scale_in,
                                                           const Tensor& res_in, bool want_sums, bool want_plain) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), g = go.to(x.scalar_type()).contiguous();
  const auto scale = scale_in.to(at::kFloat).contiguous();
  const auto res = res_in.defined() ? res_in.to(x.scalar_type()).contiguous() : Tensor();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = scale.size(1), Lg = L / G;
  auto dx = at::empty_like(x);
  Tensor prod, plain;
  ChunkGrid cg;
  bool launched = false;
  if (B * L > 0 && D > 0) {
    VDT_DISPATCH_X(x, "modulated_norm backward", [&] {
      const int n = vec_width<X>(
          D, {x.data_ptr(), g.data_ptr(), dx.data_ptr(), scale.data_ptr(), res.defined() ? res.data_ptr() : nullptr},
          {sizeof(X), sizeof(X), sizeof(X), sizeof(float), sizeof(X)});
      auto* k1 =
          n > 1 ? norm_backward_chunk_kernel<X, 16 / sizeof(X), 1, false> : norm_backward_chunk_kernel<X, 1, 1, false>;
      auto* k2 =
          n > 1 ? norm_backward_chunk_kernel<X, 16 / sizeof(X), 2, false> : norm_backward_chunk_kernel<X, 1, 2, false>;
      if (!chunk_grid(D, n, B * G, Lg, max_blocks(k1, k2), cg)) return;
      if (want_sums) prod = at::empty({B, G, cg.splits, D}, x.options().dtype(at::kFloat));
      if (want_sums && want_plain) plain = at::empty_like(prod);
      const auto stream = at::cuda::getCurrentCUDAStream();
      auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(B * G * cg.splits), cg.threads, 0, stream>>>(
            g.data_ptr<X>(), x.data_ptr<X>(), res.defined() ? res.data_ptr<X>() : nullptr, mean.data_ptr<float>(),
            rstd.data_ptr<float>(), scale.data_ptr<float>(), dx.data_ptr<X>(),
            prod.defined() ? prod.data_ptr<float>() : nullptr, plain.defined() ? plain.data_ptr<float>() : nullptr, D,
            Lg, cg.splits, cg.per);
      };
      launch(cg.V == 1 ? k1 : k2);
      check_launch();
      launched = true;
    });
  }
  if (!launched) {  // empty, or rows too wide: the two-kernel path
    dx = modulated_norm_backward_x(g, x, mean, rstd, scale);
    if (res.defined()) dx.add_(res);
    if (want_sums) return std::tuple_cat(std::make_tuple(dx), group_sums(g, x, mean, rstd, G, true, want_plain));
    return {dx, Tensor(), Tensor()};
  }
  // [B, G, splits, D] -> [B, G, 1, D]
  return {dx, want_sums ? prod.sum(2, /*keepdim=*/true) : Tensor(),
          want_sums && want_plain ? plain.sum(2, /*keepdim=*/true) : Tensor()};
}

std::tuple<Tensor, Tensor> modulated_norm_sums(const Tensor& go, const Tensor& x, const Tensor& mean,
                                               const Tensor& rstd, int64_t G, bool want_plain) {
  return group_sums(go, x, mean, rstd, G, true, want_plain);
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& go, const Tensor& x_in, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& weight, const Tensor& bias,
                                                       const Tensor& res_in, bool want_w, bool want_b) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), g = go.to(x.scalar_type()).contiguous();
  const auto w = weight.to(at::kFloat).contiguous();
  const auto res = res_in.defined() ? res_in.to(x.scalar_type()).contiguous() : Tensor();
  const int64_t D = x.size(-1), rows = x.numel() / std::max<int64_t>(D, 1);
  auto dx = at::empty_like(x);
  Tensor prod, plain;
  bool launched = false;
  if (rows > 0 && D > 0) {
    VDT_DISPATCH_X(x, "layer_norm backward", [&] {
      const int n = vec_width<X>(
          D, {x.data_ptr(), g.data_ptr(), dx.data_ptr(), w.data_ptr(), res.defined() ? res.data_ptr() : nullptr},
          {sizeof(X), sizeof(X), sizeof(X), sizeof(float), sizeof(X)});
      auto* k1 =
          n > 1 ? norm_backward_chunk_kernel<X, 16 / sizeof(X), 1, true> : norm_backward_chunk_kernel<X, 1, 1, true>;
      auto* k2 =
          n > 1 ? norm_backward_chunk_kernel<X, 16 / sizeof(X), 2, true> : norm_backward_chunk_kernel<X, 1, 2, true>;
      ChunkGrid cg;  // all rows one segment: the weight's sums run over every row
      if (!chunk_grid(D, n, 1, rows, max_blocks(k1, k2), cg)) return;
      if (want_w || want_b) prod = at::empty({cg.splits, D}, x.options().dtype(at::kFloat));
      if (want_b) plain = at::empty_like(prod);
      const auto stream = at::cuda::getCurrentCUDAStream();
      const auto mean_c = mean.contiguous(), rstd_c = rstd.contiguous();  // [..., 1] as native_layer_norm gives them
      (cg.V == 1 ? k1 : k2)<<<static_cast<unsigned>(cg.splits), cg.threads, 0, stream>>>(
          g.data_ptr<X>(), x.data_ptr<X>(), res.defined() ? res.data_ptr<X>() : nullptr, mean_c.data_ptr<float>(),
          rstd_c.data_ptr<float>(), w.data_ptr<float>(), dx.data_ptr<X>(),
          prod.defined() ? prod.data_ptr<float>() : nullptr, plain.defined() ? plain.data_ptr<float>() : nullptr, D,
          rows, cg.splits, cg.per);
      check_launch();
      launched = true;
    });
  }
  if (!launched) {  // empty, or rows too wide: ATen's backward, then the residual's gradient
    auto [dx_aten, dw, db] =
        at::native_layer_norm_backward(g, x, {D}, mean, rstd, weight, bias, {true, want_w, want_b});
    if (res.defined()) dx_aten.add_(res);
    return {dx_aten, want_w ? dw.to(at::kFloat) : Tensor(), want_b ? db.to(at::kFloat) : Tensor()};
  }
  return {dx, want_w ? prod.sum(0) : Tensor(), want_b ? plain.sum(0) : Tensor()};  // [splits, D] -> [D]
}

std::tuple<Tensor, Tensor> gated_add_backward(const Tensor& go, const Tensor& y_in, const Tensor& gate_in,
                                              at::ScalarType y_dtype, bool want_y, bool want_gate) {
  c10::cuda::CUDAGuard guard(go.device());
  const auto g = go.to(y_dtype).contiguous(), gate = gate_in.to(at::kFloat).contiguous();
  const auto y = want_gate ? y_in.contiguous() : Tensor();
  const int64_t B = g.size(0), L = g.size(1), D = g.size(2), G = gate.size(1), Lg = L / G;
  Tensor dy = want_y ? at::empty_like(g) : Tensor(), prod;
  ChunkGrid cg;
  bool launched = false;
  if (B * L > 0 && D > 0 && (want_y || want_gate)) {
    VDT_DISPATCH_X(g, "gated_add backward", [&] {
      const int n = vec_width<X>(
          D, {g.data_ptr(), gate.data_ptr(), want_gate ? y.data_ptr() : nullptr, want_y ? dy.data_ptr() : nullptr},
          {sizeof(X), sizeof(float), sizeof(X), sizeof(X)});
      auto* k1 = n > 1 ? gate_backward_chunk_kernel<X, 16 / sizeof(X), 1> : gate_backward_chunk_kernel<X, 1, 1>;
      auto* k2 = n > 1 ? gate_backward_chunk_kernel<X, 16 / sizeof(X), 2> : gate_backward_chunk_kernel<X, 1, 2>;
      if (!chunk_grid(D, n, B * G, Lg, max_blocks(k1, k2), cg)) return;
      if (want_gate) prod = at::empty({B, G, cg.splits, D}, g.options().dtype(at::kFloat));
      const auto stream = at::cuda::getCurrentCUDAStream();
      auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(B * G * cg.splits), cg.threads, 0, stream>>>(
            g.data_ptr<X>(), want_gate ? y.data_ptr<X>() : nullptr, gate.data_ptr<float>(),
            want_y ? dy.data_ptr<X>() : nullptr, want_gate ? prod.data_ptr<float>() : nullptr, D, Lg, cg.splits,
            cg.per);
      };
      launch(cg.V == 1 ? k1 : k2);
      check_launch();
      launched = true;
    });
  }
  if (!launched) {  // empty, nothing wanted, or rows too wide: one kernel each
    if (want_y) dy = group_scale(g, gate, y_dtype);
    return {dy, want_gate ? std::get<0>(group_sums(g, y, {}, {}, G, false, false)) : Tensor()};
  }
  return {dy, want_gate ? prod.sum(2, /*keepdim=*/true) : Tensor()};  // [B, G, splits, D] -> [B, G, 1, D]
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
        if (n > 1)
          launch(scale_kernel<X, M, X, true, 16 / sizeof(X), IndexRows>);
        else
          launch(scale_kernel<X, M, X, true, 1, IndexRows>);
      } else {
        if (n > 1)
          launch(scale_kernel<X, M, X, false, 16 / sizeof(X), IndexRows>);
        else
          launch(scale_kernel<X, M, X, false, 1, IndexRows>);
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
  const int64_t rows_per_chunk = std::max<int64_t>(128, (S + 63) / 64),
                chunks = (S + rows_per_chunk - 1) / rows_per_chunk;
  auto prod = at::empty({chunks, R, D}, g.options().dtype(at::kFloat));
  auto plain = want_plain ? at::empty_like(prod) : Tensor();
  const dim3 grid((D + tile - 1) / tile, chunks);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(other, "h3 row sums", [&] {
    row_sums_kernel<X><<<grid, tile, per_col * tile, stream>>>(
        g.data_ptr<X>(), other.data_ptr<X>(), r.data_ptr<int64_t>(), prod.data_ptr<float>(),
        want_plain ? plain.data_ptr<float>() : nullptr, S, D, R, rows_per_chunk);
  });
  check_launch();
  return {prod.sum(0), want_plain ? plain.sum(0) : Tensor()};  // [chunks, R, D] -> [R, D]
}

}  // namespace vdt::kernels::cuda
