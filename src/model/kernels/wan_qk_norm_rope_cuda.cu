// CUDA kernels of wan_qk_norm_rope.h: one thread block per token row of q or k (grid.y = the part). Forward: sum of
// squares over the full width D (warp shuffle + shared-memory block reduction, float32), n = x * rstd rounded to x's
// dtype, y = n * w rounded, then each interleaved pair (2j, 2j + 1) of a head rotated by the table's angle j in float32
// and rounded once, as the reference (ATen rms_norm, the weight multiply, apply_rope's complex multiply in float32).
// Backward: the rotation's transpose, times w, RMSNorm's dx = rstd * (gn - nf * mean(gn * nf)); the norm weights'
// gradient sum_rows gy * n as fixed partial sums: each block walks a fixed set of rows and keeps its columns' sums in
// shared memory (each thread owns the same columns in every row: no races, no atomics), then one ATen sum. The sums sit
// in shared memory as [round, element, thread], so a warp's lanes update consecutive words (laid out by column, a
// lane's vector was 8 words from the next lane's: 8-way bank conflicts on every update). Widths are below 2^31 (at
// most kWanQkMaxWidth), so column and angle arithmetic is 32-bit.
// 16-byte vector loads when the width and the pointers allow, else one pair at a time. Without kRope (cross-attention's
// q and k, wan_rms_norm_*) the same kernels normalise one tensor (grid.y = 1) and skip the rotation: y = n * w.
#include "model/kernels/wan_qk_norm_rope_cuda.h"
#include "core/cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
using bf16 = c10::BFloat16;

using cuda_common::block_sum, cuda_common::load, cuda_common::rnd, cuda_common::store;

struct Geometry {
  int64_t rows, L, D;  // token rows B * L, tokens per sample (the table's rows), width N * Dh
  int Dh;              // head width (the table has Dh / 2 angles per token)
};

// Column c of a row within its head, for c = (a vector's first column within its head) + j, j < N: c < Dh + N, and a
// vector spans more than two heads only when Dh < N (tiny test widths).
__device__ __forceinline__ int head_column(int c, int Dh) {
  while (c >= Dh) c -= Dh;
  return c;
}

template <typename T, int N, bool kVec, bool kRope>
__global__ void forward_kernel(const T* __restrict__ xq, const T* __restrict__ xk, const T* __restrict__ wq,
                               const T* __restrict__ wk, const float* __restrict__ cos, const float* __restrict__ sin,
                               T* __restrict__ q, T* __restrict__ k, float* __restrict__ rstd_out, Geometry g,
                               float eps) {
  const int part = blockIdx.y;
  const int64_t row = blockIdx.x;
  const T* x = (part ? xk : xq) + row * g.D;
  const T* w = part ? wk : wq;
  T* out = (part ? k : q) + row * g.D;
  const int H2 = g.Dh / 2;
  const float* cr = kRope ? cos + (row % g.L) * H2 : nullptr;
  const float* sr = kRope ? sin + (row % g.L) * H2 : nullptr;
  const int D = static_cast<int>(g.D);
  float acc = 0.f;
  for (int i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N];
    load<N, kVec>(x + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) acc += v[j] * v[j];
  }
  const float r = rsqrtf(block_sum(acc) / static_cast<float>(D) + eps);
  for (int i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N], wv[N], o[N];
    load<N, kVec>(x + i, v);
    load<N, kVec>(w + i, wv);
    const int h0 = kRope ? i % g.Dh : 0;  // the vector's first column within its head
#pragma unroll
    for (int j = 0; j < N; j += 2) {
      const float y0 = rnd<T>(rnd<T>(v[j] * r) * wv[j]), y1 = rnd<T>(rnd<T>(v[j + 1] * r) * wv[j + 1]);
      if constexpr (kRope) {
        const int a = head_column(h0 + j, g.Dh) / 2;  // the pair's angle within its head
        const float c = cr[a], s = sr[a];
        o[j] = y0 * c - y1 * s;
        o[j + 1] = y0 * s + y1 * c;
      } else {
        o[j] = y0, o[j + 1] = y1;
      }
    }
    store<N, kVec>(out + i, o);
  }
  if (threadIdx.x == 0) rstd_out[part * g.rows + row] = r;
}

// grid (P, 2): block b of part p takes rows b, b + P, ...; with kW it writes its weight-gradient partial sums to
// dw_part[p, b, :] (acc_w in shared memory: [rounds, N, blockDim.x], see the top of the file).
template <typename T, int N, bool kVec, bool kW, bool kRope>
__global__ void backward_kernel(const T* __restrict__ gq, const T* __restrict__ gk, const T* __restrict__ xq,
                                const T* __restrict__ xk, const T* __restrict__ wq, const T* __restrict__ wk,
                                const float* __restrict__ rstd, const float* __restrict__ cos,
                                const float* __restrict__ sin, T* __restrict__ dq, T* __restrict__ dk,
                                float* __restrict__ dw_part, Geometry g) {
  extern __shared__ float acc_w[];  // [rounds, N, blockDim.x] when kW
  const int part = blockIdx.y;
  const T* go = part ? gk : gq;
  const T* xs = part ? xk : xq;
  const T* w = part ? wk : wq;
  T* dxs = part ? dk : dq;
  const int H2 = g.Dh / 2, D = static_cast<int>(g.D), step = blockDim.x * N;
  auto slot = [&](int i, int j) { return ((i / step) * N + j) * blockDim.x + threadIdx.x; };  // i: the vector's column
  if constexpr (kW)
    for (int i = threadIdx.x * N; i < D; i += step)
#pragma unroll
      for (int j = 0; j < N; ++j) acc_w[slot(i, j)] = 0.f;
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const float r = rstd[part * g.rows + row];
    const float* cr = kRope ? cos + (row % g.L) * H2 : nullptr;
    const float* sr = kRope ? sin + (row % g.L) * H2 : nullptr;
    const T* gr = go + row * g.D;
    const T* x = xs + row * g.D;
    // gy = rope^T(g) per pair; gn = gy * w; nf = x * rstd
    auto pair = [&](const float(&gv)[N], const float(&v)[N], const float(&wv)[N], int h0, int j, float* gy, float* gn,
                    float* nf) {
      if constexpr (kRope) {
        const int a = head_column(h0 + j, g.Dh) / 2;
        const float c = cr[a], s = sr[a];
        gy[0] = gv[j] * c + gv[j + 1] * s;
        gy[1] = gv[j + 1] * c - gv[j] * s;
      } else {
        gy[0] = gv[j], gy[1] = gv[j + 1];
      }
      gn[0] = gy[0] * wv[j], gn[1] = gy[1] * wv[j + 1];
      nf[0] = v[j] * r, nf[1] = v[j + 1] * r;
    };
    float dot = 0.f;
    for (int i = threadIdx.x * N; i < D; i += step) {
      float gv[N], v[N], wv[N];
      load<N, kVec>(gr + i, gv);
      load<N, kVec>(x + i, v);
      load<N, kVec>(w + i, wv);
      const int h0 = kRope ? i % g.Dh : 0;
#pragma unroll
      for (int j = 0; j < N; j += 2) {
        float gy[2], gn[2], nf[2];
        pair(gv, v, wv, h0, j, gy, gn, nf);
        dot += gn[0] * nf[0] + gn[1] * nf[1];
        if constexpr (kW) {
          acc_w[slot(i, j)] += gy[0] * rnd<T>(nf[0]);
          acc_w[slot(i, j + 1)] += gy[1] * rnd<T>(nf[1]);
        }
      }
    }
    const float mean = block_sum(dot) / static_cast<float>(D);
    for (int i = threadIdx.x * N; i < D; i += step) {
      float gv[N], v[N], wv[N], o[N];
      load<N, kVec>(gr + i, gv);
      load<N, kVec>(x + i, v);
      load<N, kVec>(w + i, wv);
      const int h0 = kRope ? i % g.Dh : 0;
#pragma unroll
      for (int j = 0; j < N; j += 2) {
        float gy[2], gn[2], nf[2];
        pair(gv, v, wv, h0, j, gy, gn, nf);
        o[j] = r * (gn[0] - nf[0] * mean);
        o[j + 1] = r * (gn[1] - nf[1] * mean);
      }
      store<N, kVec>(dxs + row * g.D + i, o);
    }
  }
  if constexpr (kW)
    for (int i = threadIdx.x * N; i < D; i += step)
#pragma unroll
      for (int j = 0; j < N; ++j)
        dw_part[(static_cast<int64_t>(part) * gridDim.x + blockIdx.x) * g.D + i + j] = acc_w[slot(i, j)];
}

// 16-byte vectors when D and every pointer allow.
template <typename T>
bool vectorizable(int64_t D, std::initializer_list<const void*> ptrs) {
  constexpr int n = 16 / sizeof(T);
  if (D % n != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Threads per block: as few 32-lane warps as cover a row's steps in the fewest rounds (D 3072 in bf16: 384 vectors,
// two rounds of 192 threads rather than 256 + 128).
int block_threads(int64_t steps) {
  const int64_t rounds = (steps + 255) / 256;
  const int64_t per_round = (steps + rounds - 1) / rounds;
  return static_cast<int>(std::max<int64_t>(32, (per_round + 31) / 32 * 32));
}

Geometry geometry(const Tensor& x, const Tensor& cos) {
  return {x.size(0) * x.size(1), x.size(1), x.size(2), cos.defined() ? static_cast<int>(2 * cos.size(1)) : 2};
}

#define VDT_WAN_QK_DISPATCH(t, ...) VDT_DISPATCH_FLOAT_BF16(t, T, "wan_qk_norm_rope", __VA_ARGS__)

// Both parts (q, k; with RoPE) or one (xk == xq, no cos / sin: the plain norm): out [parts, B, L, D] in x's dtype and
// rstd [parts, B * L] float32.
std::tuple<Tensor, Tensor> forward(const Tensor& q_in, const Tensor& k_in, const Tensor& w_q, const Tensor& w_k,
                                   double eps, const Tensor& cos_in, const Tensor& sin_in, int parts) {
  TORCH_CHECK(q_in.dim() == 3 && q_in.size(2) <= kWanQkMaxWidth && q_in.size(2) % 2 == 0, "wan_qk_norm_rope: expected ",
              "q_in [B, L, D <= ", kWanQkMaxWidth, "] with D even, got ", q_in.sizes());
  const c10::cuda::CUDAGuard guard(q_in.device());
  const auto xq = q_in.contiguous(), xk = k_in.contiguous(), wq = w_q.contiguous(), wk = w_k.contiguous();
  const bool rope = cos_in.defined();
  const auto cos = rope ? cos_in.contiguous() : Tensor(), sin = rope ? sin_in.contiguous() : Tensor();
  const auto g = geometry(xq, cos);
  TORCH_CHECK(g.rows < (int64_t{1} << 31), "wan_qk_norm_rope: ", g.rows, " token rows exceed one grid");
  auto out = at::empty({parts, xq.size(0), xq.size(1), g.D}, xq.options());
  auto rstd = at::empty({parts, g.rows}, xq.options().dtype(at::kFloat));
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_WAN_QK_DISPATCH(xq, [&] {
    constexpr int V = 16 / sizeof(T);
    T* q = out.data_ptr<T>();
    T* k = q + (parts - 1) * g.rows * g.D;
    const bool vec = vectorizable<T>(g.D, {xq.data_ptr(), xk.data_ptr(), wq.data_ptr(), wk.data_ptr(), q, k});
    const dim3 grid(static_cast<unsigned>(g.rows), static_cast<unsigned>(parts));
    auto launch = [&](auto kernel, int n) {
      kernel<<<grid, block_threads(g.D / n), 0, stream>>>(xq.data_ptr<T>(), xk.data_ptr<T>(), wq.data_ptr<T>(),
                                                          wk.data_ptr<T>(), rope ? cos.data_ptr<float>() : nullptr,
                                                          rope ? sin.data_ptr<float>() : nullptr, q, k,
                                                          rstd.data_ptr<float>(), g, static_cast<float>(eps));
    };
    if (vec && rope)
      launch(forward_kernel<T, V, true, true>, V);
    else if (vec)
      launch(forward_kernel<T, V, true, false>, V);
    else if (rope)
      launch(forward_kernel<T, 2, false, true>, 2);
    else
      launch(forward_kernel<T, 2, false, false>, 2);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, rstd};
}

// The backward of forward(): gradients [B, L, D]-shaped (any view of that many elements) -> dx [parts, B, L, D] in
// x's dtype, dw [parts, D] float32 when want_w.
std::tuple<Tensor, Tensor> backward(const Tensor& gq_in, const Tensor& gk_in, const Tensor& q_in, const Tensor& k_in,
                                    const Tensor& w_q, const Tensor& w_k, const Tensor& rstd, const Tensor& cos_in,
                                    const Tensor& sin_in, bool want_w, int parts) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const auto xq = q_in.contiguous(), xk = k_in.contiguous(), wq = w_q.contiguous(), wk = w_k.contiguous();
  const auto gq = gq_in.to(xq.scalar_type()).contiguous(), gk = gk_in.to(xq.scalar_type()).contiguous();
  const bool rope = cos_in.defined();
  const auto cos = rope ? cos_in.contiguous() : Tensor(), sin = rope ? sin_in.contiguous() : Tensor();
  const auto g = geometry(xq, cos);
  auto dx = at::empty({parts, xq.size(0), xq.size(1), g.D}, xq.options());
  // Weight gradients: a few blocks per SM, each over a fixed stride of rows; without them one block per row.
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t P = want_w ? std::min<int64_t>(g.rows, 4 * static_cast<int64_t>(sms)) : g.rows;
  TORCH_CHECK(P < (int64_t{1} << 31), "wan_qk_norm_rope: ", P, " token rows exceed one grid");
  auto dw_part = want_w ? at::empty({parts, P, g.D}, xq.options().dtype(at::kFloat)) : Tensor();
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_WAN_QK_DISPATCH(xq, [&] {
    constexpr int V = 16 / sizeof(T);
    T* dq = dx.data_ptr<T>();
    T* dk = dq + (parts - 1) * g.rows * g.D;
    const bool vec = vectorizable<T>(
        g.D, {xq.data_ptr(), xk.data_ptr(), wq.data_ptr(), wk.data_ptr(), gq.data_ptr(), gk.data_ptr(), dq, dk});
    const dim3 grid(static_cast<unsigned>(P), static_cast<unsigned>(parts));
    auto launch = [&](auto kernel, int n) {
      const int threads = block_threads(g.D / n);
      const int64_t rounds = (g.D / n + threads - 1) / threads;  // acc_w: [rounds, n, threads] floats
      const size_t shm = want_w ? static_cast<size_t>(rounds * n * threads) * sizeof(float) : 0;
      kernel<<<grid, threads, shm, stream>>>(
          gq.data_ptr<T>(), gk.data_ptr<T>(), xq.data_ptr<T>(), xk.data_ptr<T>(), wq.data_ptr<T>(), wk.data_ptr<T>(),
          rstd.data_ptr<float>(), rope ? cos.data_ptr<float>() : nullptr, rope ? sin.data_ptr<float>() : nullptr, dq,
          dk, want_w ? dw_part.data_ptr<float>() : nullptr, g);
    };
    // <T, N, vectors, weight gradient, RoPE>
    if (rope) {
      if (vec && want_w)
        launch(backward_kernel<T, V, true, true, true>, V);
      else if (vec)
        launch(backward_kernel<T, V, true, false, true>, V);
      else if (want_w)
        launch(backward_kernel<T, 2, false, true, true>, 2);
      else
        launch(backward_kernel<T, 2, false, false, true>, 2);
    } else {
      if (vec && want_w)
        launch(backward_kernel<T, V, true, true, false>, V);
      else if (vec)
        launch(backward_kernel<T, V, true, false, false>, V);
      else if (want_w)
        launch(backward_kernel<T, 2, false, true, false>, 2);
      else
        launch(backward_kernel<T, 2, false, false, false>, 2);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {dx, want_w ? dw_part.sum(1) : Tensor()};  // [parts, P, D] -> [parts, D]
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> wan_qk_norm_rope_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& w_q,
                                                            const Tensor& w_k, double eps, const Tensor& cos,
                                                            const Tensor& sin, int64_t heads) {
  TORCH_CHECK(cos.defined() && sin.defined(), "wan_qk_norm_rope: the RoPE table is missing");
  auto [out, rstd] = forward(q_in, k_in, w_q, w_k, eps, cos, sin, /*parts=*/2);
  const int64_t D = q_in.size(2);
  out = out.unflatten(-1, {heads, D / heads});  // [2, B, L, D] -> [2, B, L, N, Dh]
  return {out[0], out[1], rstd};
}

std::tuple<Tensor, Tensor, Tensor> wan_qk_norm_rope_backward(const Tensor& gq, const Tensor& gk, const Tensor& q_in,
                                                             const Tensor& k_in, const Tensor& w_q, const Tensor& w_k,
                                                             const Tensor& rstd, const Tensor& cos, const Tensor& sin,
                                                             bool want_w) {
  auto [dx, dw] = backward(gq, gk, q_in, k_in, w_q, w_k, rstd, cos, sin, want_w, /*parts=*/2);
  return {dx[0], dx[1], dw};
}

std::tuple<Tensor, Tensor> wan_rms_norm_forward(const Tensor& x, const Tensor& w, double eps) {
  auto [out, rstd] = forward(x, x, w, w, eps, Tensor(), Tensor(), /*parts=*/1);
  return {out[0], rstd};
}

std::tuple<Tensor, Tensor> wan_rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& rstd,
                                                 bool want_w) {
  auto [dx, dw] = backward(g, g, x, x, w, w, rstd, Tensor(), Tensor(), want_w, /*parts=*/1);
  return {dx[0], want_w ? dw[0] : Tensor()};
}

}  // namespace vdt::kernels::cuda
