// CUDA kernels of qk_norm_rope.h: one warp per head row (s, n) of q or k. Forward: sum of squares (warp shuffle,
// float32), n = x * rstd rounded to x's dtype, y = n * w rounded, then rotate-half over the first 6R channels with the
// tables rounded to x's dtype and each product and the sum rounded, as the reference ops. Backward: the rotation by
// the negated angle, times w, then RMSNorm's backward dx = rstd * (gn - nf * mean(gn * nf)), nf = x * rstd.
#include "model/kernels/qk_norm_rope_cuda.h"
#include "core/cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
constexpr int kWarps = 8;  // rows per block

using cuda_common::rnd;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct Geometry {
  int64_t S, N, ss, sn, sp;  // rows, heads, qkv strides of s, n and the q/k/v part (elements)
  int Dh, R3;                // head width, 3R (half the rotated channels)
};

template <typename T>
__global__ void forward_kernel(const T* __restrict__ qkv, const T* __restrict__ wq, const T* __restrict__ wk,
                               const float* __restrict__ cos, const float* __restrict__ sin, T* __restrict__ q,
                               T* __restrict__ k, float* __restrict__ rstd_out, Geometry g, float eps) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // over [2, S, N]
  const int64_t SN = g.S * g.N;
  if (row >= 2 * SN) return;
  const int part = static_cast<int>(row / SN);
  const int64_t i = row % SN, s = i / g.N, n = i % g.N;
  const T* x = qkv + s * g.ss + n * g.sn + part * g.sp;
  const T* w = part ? wk : wq;
  T* out = (part ? k : q) + i * g.Dh;
  float* y = smem + warp * g.Dh;
  float acc = 0.f;
  for (int d = lane; d < g.Dh; d += 32) {
    const float v = static_cast<float>(x[d]);
    acc += v * v;
  }
  const float r = rsqrtf(warp_sum(acc) / g.Dh + eps);
  for (int d = lane; d < g.Dh; d += 32) y[d] = rnd<T>(rnd<T>(static_cast<float>(x[d]) * r) * static_cast<float>(w[d]));
  __syncwarp();
  const int rot = 2 * g.R3;
  for (int d = lane; d < g.Dh; d += 32) {
    float o = y[d];
    if (d < rot) {
      const float c = rnd<T>(cos[s * rot + d]), sn_ = rnd<T>(sin[s * rot + d]);
      const float partner = d < g.R3 ? -y[d + g.R3] : y[d - g.R3];
      o = rnd<T>(rnd<T>(o * c) + rnd<T>(partner * sn_));
    }
    out[d] = static_cast<T>(o);
  }
  if (lane == 0) rstd_out[row] = r;
}

template <typename T>
__global__ void backward_kernel(const T* __restrict__ gq, const T* __restrict__ gk, const T* __restrict__ qkv,
                                const T* __restrict__ wq, const T* __restrict__ wk, const float* __restrict__ rstd,
                                const float* __restrict__ cos, const float* __restrict__ sin, T* __restrict__ dqkv,
                                Geometry g) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t SN = g.S * g.N;
  if (row >= 2 * SN) return;
  const int part = static_cast<int>(row / SN);
  const int64_t i = row % SN, s = i / g.N, n = i % g.N;
  const T* go = (part ? gk : gq) + i * g.Dh;
  const T* x = qkv + s * g.ss + n * g.sn + part * g.sp;
  const T* w = part ? wk : wq;
  T* dx = dqkv + (i * 3 + part) * g.Dh;  // dqkv [S, N, 3, Dh] contiguous
  float* gs = smem + warp * g.Dh;
  for (int d = lane; d < g.Dh; d += 32) gs[d] = static_cast<float>(go[d]);
  __syncwarp();
  const int rot = 2 * g.R3;
  const float r = rstd[row];
  float gn[8], nf[8];  // Dh <= 256
  float dot = 0.f;
  int j = 0;
  for (int d = lane; d < g.Dh; d += 32, ++j) {
    float gy = gs[d];
    if (d < rot) {
      gy *= rnd<T>(cos[s * rot + d]);
      if (d < g.R3)
        gy += gs[d + g.R3] * rnd<T>(sin[s * rot + d + g.R3]);
      else
        gy -= gs[d - g.R3] * rnd<T>(sin[s * rot + d - g.R3]);
    }
    gn[j] = gy * static_cast<float>(w[d]);
    nf[j] = static_cast<float>(x[d]) * r;
    dot += gn[j] * nf[j];
  }
  const float mean = warp_sum(dot) / g.Dh;
  j = 0;
  for (int d = lane; d < g.Dh; d += 32, ++j) dx[d] = static_cast<T>(r * (gn[j] - nf[j] * mean));
}

Geometry geometry(const Tensor& qkv, const Tensor& cos) {
  return {qkv.size(0),
          qkv.size(1),
          qkv.stride(0),
          qkv.stride(1),
          qkv.stride(2),
          static_cast<int>(qkv.size(3)),
          static_cast<int>(cos.size(1) / 2)};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> qk_norm_rope_forward(const Tensor& qkv, const Tensor& w_q, const Tensor& w_k,
                                                        double eps, const Tensor& cos_in, const Tensor& sin_in,
                                                        const Tensor& k_out) {
  TORCH_CHECK(qkv.dim() == 4 && qkv.size(2) == 3 && qkv.stride(3) == 1 && qkv.size(3) <= 256, "qk_norm_rope: expected ",
              "qkv [S, N, 3, Dh <= 256] with Dh contiguous, got ", qkv.sizes(), " strides ", qkv.strides());
  const c10::cuda::CUDAGuard guard(qkv.device());
  const auto cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const auto g = geometry(qkv, cos);
  auto q = at::empty({g.S, g.N, g.Dh}, qkv.options());
  TORCH_CHECK(!k_out.defined() || (k_out.sizes() == q.sizes() && k_out.is_contiguous() &&
                                   k_out.scalar_type() == q.scalar_type() && k_out.device() == q.device()),
              "qk_norm_rope: k_out must be [", g.S, ", ", g.N, ", ", g.Dh, "] contiguous in qkv's dtype, got ",
              k_out.sizes());
  auto k = k_out.defined() ? k_out : at::empty_like(q);
  auto rstd = at::empty({2, g.S, g.N}, qkv.options().dtype(at::kFloat));
  const int64_t rows = 2 * g.S * g.N;
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps)), block(kWarps * 32);
  const size_t shm = kWarps * g.Dh * sizeof(float);
  auto stream = at::cuda::getCurrentCUDAStream();
  const auto wq = w_q.contiguous(), wk = w_k.contiguous();
  if (qkv.scalar_type() == at::kBFloat16) {
    using T = c10::BFloat16;
    forward_kernel<T><<<grid, block, shm, stream>>>(
        qkv.data_ptr<T>(), wq.data_ptr<T>(), wk.data_ptr<T>(), cos.data_ptr<float>(), sin.data_ptr<float>(),
        q.data_ptr<T>(), k.data_ptr<T>(), rstd.data_ptr<float>(), g, static_cast<float>(eps));
  } else {
    TORCH_CHECK(qkv.scalar_type() == at::kFloat, "qk_norm_rope: bfloat16 or float32, got ", qkv.scalar_type());
    forward_kernel<float><<<grid, block, shm, stream>>>(
        qkv.data_ptr<float>(), wq.data_ptr<float>(), wk.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(),
        q.data_ptr<float>(), k.data_ptr<float>(), rstd.data_ptr<float>(), g, static_cast<float>(eps));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {q, k, rstd};
}

void qk_norm_rope_backward(const Tensor& gq_in, const Tensor& gk_in, const Tensor& qkv, const Tensor& w_q,
                           const Tensor& w_k, const Tensor& rstd, const Tensor& cos_in, const Tensor& sin_in,
                           Tensor& dqkv) {
  const c10::cuda::CUDAGuard guard(qkv.device());
  const auto cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const auto gq = gq_in.contiguous(), gk = gk_in.contiguous(), wq = w_q.contiguous(), wk = w_k.contiguous();
  TORCH_CHECK(dqkv.is_contiguous() && dqkv.sizes() == qkv.sizes(), "qk_norm_rope backward: dqkv must be contiguous ",
              qkv.sizes());
  const auto g = geometry(qkv, cos);
  const int64_t rows = 2 * g.S * g.N;
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps)), block(kWarps * 32);
  const size_t shm = kWarps * g.Dh * sizeof(float);
  auto stream = at::cuda::getCurrentCUDAStream();
  if (qkv.scalar_type() == at::kBFloat16) {
    using T = c10::BFloat16;
    backward_kernel<T><<<grid, block, shm, stream>>>(
        gq.data_ptr<T>(), gk.data_ptr<T>(), qkv.data_ptr<T>(), wq.data_ptr<T>(), wk.data_ptr<T>(),
        rstd.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), dqkv.data_ptr<T>(), g);
  } else {
    backward_kernel<float><<<grid, block, shm, stream>>>(
        gq.data_ptr<float>(), gk.data_ptr<float>(), qkv.data_ptr<float>(), wq.data_ptr<float>(), wk.data_ptr<float>(),
        rstd.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), dqkv.data_ptr<float>(), g);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace vdt::kernels::cuda
