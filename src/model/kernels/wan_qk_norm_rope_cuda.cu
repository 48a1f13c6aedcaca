// CUDA kernels of wan_qk_norm_rope.h: one thread block per token row of q or k (grid.y = the part). Forward: sum of
// squares over the full width D (warp shuffle + shared-memory block reduction, float32), n = x * rstd rounded to x's
// dtype, y = n * w rounded, then each interleaved pair (2j, 2j + 1) of a head rotated by the table's angle j in float32
// and rounded once, as the reference (ATen rms_norm, the weight multiply, apply_rope's complex multiply in float32).
// Backward: the rotation's transpose, times w, RMSNorm's dx = rstd * (gn - nf * mean(gn * nf)); the norm weights'
// gradient sum_rows gy * n as fixed partial sums: each block walks a fixed set of rows and keeps its columns' sums in
// shared memory (each thread owns the same columns in every row: no races, no atomics), then one ATen sum.
// 16-byte vector loads when the width and the pointers allow, else one pair at a time.
#include "model/kernels/wan_qk_norm_rope_cuda.h"
#include "model/kernels/cuda_common.cuh"

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

using common::block_sum, common::load, common::rnd, common::store;

struct Geometry {
  int64_t rows, L, D;  // token rows B * L, tokens per sample (the table's rows), width N * Dh
  int Dh;              // head width (the table has Dh / 2 angles per token)
};

template <typename T, int N, bool kVec>
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
  const float* cr = cos + (row % g.L) * H2;
  const float* sr = sin + (row % g.L) * H2;
  float acc = 0.f;
  for (int64_t i = threadIdx.x * N; i < g.D; i += blockDim.x * N) {
    float v[N];
    load<N, kVec>(x + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) acc += v[j] * v[j];
  }
  const float r = rsqrtf(block_sum(acc) / static_cast<float>(g.D) + eps);
  for (int64_t i = threadIdx.x * N; i < g.D; i += blockDim.x * N) {
    float v[N], wv[N], o[N];
    load<N, kVec>(x + i, v);
    load<N, kVec>(w + i, wv);
#pragma unroll
    for (int j = 0; j < N; j += 2) {
      const int a = static_cast<int>((i + j) % g.Dh) / 2;  // the pair's angle within its head
      const float c = cr[a], s = sr[a];
      const float y0 = rnd<T>(rnd<T>(v[j] * r) * wv[j]), y1 = rnd<T>(rnd<T>(v[j + 1] * r) * wv[j + 1]);
      o[j] = y0 * c - y1 * s;
      o[j + 1] = y0 * s + y1 * c;
    }
    store<N, kVec>(out + i, o);
  }
  if (threadIdx.x == 0) rstd_out[part * g.rows + row] = r;
}

// grid (P, 2): block b of part p takes rows b, b + P, ...; with kW it writes its weight-gradient partial sums to
// dw_part[p, b, :].
template <typename T, int N, bool kVec, bool kW>
__global__ void backward_kernel(const T* __restrict__ gq, const T* __restrict__ gk, const T* __restrict__ xq,
                                const T* __restrict__ xk, const T* __restrict__ wq, const T* __restrict__ wk,
                                const float* __restrict__ rstd, const float* __restrict__ cos,
                                const float* __restrict__ sin, T* __restrict__ dq, T* __restrict__ dk,
                                float* __restrict__ dw_part, Geometry g) {
  extern __shared__ float acc_w[];  // [D] when kW
  const int part = blockIdx.y;
  const T* go = part ? gk : gq;
  const T* xs = part ? xk : xq;
  const T* w = part ? wk : wq;
  T* dxs = part ? dk : dq;
  const int H2 = g.Dh / 2;
  if constexpr (kW)
    for (int64_t i = threadIdx.x * N; i < g.D; i += blockDim.x * N)
#pragma unroll
      for (int j = 0; j < N; ++j) acc_w[i + j] = 0.f;
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const float r = rstd[part * g.rows + row];
    const float* cr = cos + (row % g.L) * H2;
    const float* sr = sin + (row % g.L) * H2;
    const T* gr = go + row * g.D;
    const T* x = xs + row * g.D;
    // gy = rope^T(g) per pair; gn = gy * w; nf = x * rstd
    auto pair = [&](const float (&gv)[N], const float (&v)[N], const float (&wv)[N], int64_t i, int j, float* gy,
                    float* gn, float* nf) {
      const int a = static_cast<int>((i + j) % g.Dh) / 2;
      const float c = cr[a], s = sr[a];
      gy[0] = gv[j] * c + gv[j + 1] * s;
      gy[1] = gv[j + 1] * c - gv[j] * s;
      gn[0] = gy[0] * wv[j], gn[1] = gy[1] * wv[j + 1];
      nf[0] = v[j] * r, nf[1] = v[j + 1] * r;
    };
    float dot = 0.f;
    for (int64_t i = threadIdx.x * N; i < g.D; i += blockDim.x * N) {
      float gv[N], v[N], wv[N];
      load<N, kVec>(gr + i, gv);
      load<N, kVec>(x + i, v);
      load<N, kVec>(w + i, wv);
#pragma unroll
      for (int j = 0; j < N; j += 2) {
        float gy[2], gn[2], nf[2];
        pair(gv, v, wv, i, j, gy, gn, nf);
        dot += gn[0] * nf[0] + gn[1] * nf[1];
        if constexpr (kW) {
          acc_w[i + j] += gy[0] * rnd<T>(nf[0]);
          acc_w[i + j + 1] += gy[1] * rnd<T>(nf[1]);
        }
      }
    }
    const float mean = block_sum(dot) / static_cast<float>(g.D);
    for (int64_t i = threadIdx.x * N; i < g.D; i += blockDim.x * N) {
      float gv[N], v[N], wv[N], o[N];
      load<N, kVec>(gr + i, gv);
      load<N, kVec>(x + i, v);
      load<N, kVec>(w + i, wv);
#pragma unroll
      for (int j = 0; j < N; j += 2) {
        float gy[2], gn[2], nf[2];
        pair(gv, v, wv, i, j, gy, gn, nf);
        o[j] = r * (gn[0] - nf[0] * mean);
        o[j + 1] = r * (gn[1] - nf[1] * mean);
      }
      store<N, kVec>(dxs + row * g.D + i, o);
    }
  }
  if constexpr (kW)
    for (int64_t i = threadIdx.x * N; i < g.D; i += blockDim.x * N)
#pragma unroll
      for (int j = 0; j < N; ++j) dw_part[(static_cast<int64_t>(part) * gridDim.x + blockIdx.x) * g.D + i + j] = acc_w[i + j];
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
  return {x.size(0) * x.size(1), x.size(1), x.size(2), static_cast<int>(2 * cos.size(1))};
}

#define VDT_WAN_QK_DISPATCH(t, ...)                                                                              \
  [&] {                                                                                                          \
    if ((t).scalar_type() == at::kFloat) {                                                                       \
      using T = float;                                                                                           \
      return __VA_ARGS__();                                                                                      \
    }                                                                                                            \
    TORCH_CHECK((t).scalar_type() == at::kBFloat16, "wan_qk_norm_rope: the CUDA kernels take float32 or bfloat16, " \
                "got ", (t).scalar_type());                                                                      \
    using T = bf16;                                                                                              \
    return __VA_ARGS__();                                                                                        \
  }()

}  // namespace

std::tuple<Tensor, Tensor, Tensor> wan_qk_norm_rope_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& w_q,
                                                            const Tensor& w_k, double eps, const Tensor& cos_in,
                                                            const Tensor& sin_in, int64_t heads) {
  TORCH_CHECK(q_in.dim() == 3 && q_in.size(2) <= kWanQkMaxWidth && q_in.size(2) % 2 == 0, "wan_qk_norm_rope: expected ",
              "q_in [B, L, D <= ", kWanQkMaxWidth, "] with D even, got ", q_in.sizes());
  const c10::cuda::CUDAGuard guard(q_in.device());
  const auto xq = q_in.contiguous(), xk = k_in.contiguous(), wq = w_q.contiguous(), wk = w_k.contiguous();
  const auto cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const auto g = geometry(xq, cos);
  TORCH_CHECK(g.rows < (int64_t{1} << 31), "wan_qk_norm_rope: ", g.rows, " token rows exceed one grid");
  const int64_t B = xq.size(0), L = xq.size(1);
  auto q = at::empty({B, L, heads, g.D / heads}, xq.options()), k = at::empty_like(q);
  auto rstd = at::empty({2, g.rows}, xq.options().dtype(at::kFloat));
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_WAN_QK_DISPATCH(xq, [&] {
    constexpr int V = 16 / sizeof(T);
    const bool vec = vectorizable<T>(g.D, {xq.data_ptr(), xk.data_ptr(), wq.data_ptr(), wk.data_ptr(), q.data_ptr(),
                                           k.data_ptr()});
    const dim3 grid(static_cast<unsigned>(g.rows), 2);
    auto launch = [&](auto kernel, int n) {
      kernel<<<grid, block_threads(g.D / n), 0, stream>>>(xq.data_ptr<T>(), xk.data_ptr<T>(), wq.data_ptr<T>(),
                                                          wk.data_ptr<T>(), cos.data_ptr<float>(), sin.data_ptr<float>(),
                                                          q.data_ptr<T>(), k.data_ptr<T>(), rstd.data_ptr<float>(), g,
                                                          static_cast<float>(eps));
    };
    if (vec) launch(forward_kernel<T, V, true>, V);
    else launch(forward_kernel<T, 2, false>, 2);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {q, k, rstd};
}

std::tuple<Tensor, Tensor, Tensor> wan_qk_norm_rope_backward(const Tensor& gq_in, const Tensor& gk_in,
                                                             const Tensor& q_in, const Tensor& k_in, const Tensor& w_q,
                                                             const Tensor& w_k, const Tensor& rstd,
                                                             const Tensor& cos_in, const Tensor& sin_in, bool want_w) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const auto xq = q_in.contiguous(), xk = k_in.contiguous(), wq = w_q.contiguous(), wk = w_k.contiguous();
  const auto gq = gq_in.to(xq.scalar_type()).contiguous(), gk = gk_in.to(xq.scalar_type()).contiguous();
  const auto cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const auto g = geometry(xq, cos);
  auto dq = at::empty_like(xq), dk = at::empty_like(xq);
  // Weight gradients: a few blocks per SM, each over a fixed stride of rows; without them one block per row.
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t P = want_w ? std::min<int64_t>(g.rows, 4 * static_cast<int64_t>(sms)) : g.rows;
  TORCH_CHECK(P < (int64_t{1} << 31), "wan_qk_norm_rope: ", P, " token rows exceed one grid");
  auto dw_part = want_w ? at::empty({2, P, g.D}, xq.options().dtype(at::kFloat)) : Tensor();
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_WAN_QK_DISPATCH(xq, [&] {
    constexpr int V = 16 / sizeof(T);
    const bool vec = vectorizable<T>(g.D, {xq.data_ptr(), xk.data_ptr(), wq.data_ptr(), wk.data_ptr(), gq.data_ptr(),
                                           gk.data_ptr(), dq.data_ptr(), dk.data_ptr()});
    const dim3 grid(static_cast<unsigned>(P), 2);
    const size_t shm = want_w ? static_cast<size_t>(g.D) * sizeof(float) : 0;
    auto launch = [&](auto kernel, int n) {
      kernel<<<grid, block_threads(g.D / n), shm, stream>>>(
          gq.data_ptr<T>(), gk.data_ptr<T>(), xq.data_ptr<T>(), xk.data_ptr<T>(), wq.data_ptr<T>(), wk.data_ptr<T>(),
          rstd.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), dq.data_ptr<T>(), dk.data_ptr<T>(),
          want_w ? dw_part.data_ptr<float>() : nullptr, g);
    };
    if (vec && want_w) launch(backward_kernel<T, V, true, true>, V);
    else if (vec) launch(backward_kernel<T, V, true, false>, V);
    else if (want_w) launch(backward_kernel<T, 2, false, true>, 2);
    else launch(backward_kernel<T, 2, false, false>, 2);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {dq, dk, want_w ? dw_part.sum(1) : Tensor()};  // [2, P, D] -> [2, D]
}

}  // namespace vdt::kernels::cuda
