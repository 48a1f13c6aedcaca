// CUDA kernels of swiglu.h: one thread per 8 (bfloat16) or 4 (float32) consecutive columns of one row, 16-byte loads
// of the gate and up halves when F allows, else one element at a time. float32 math with the reference's roundings.
#include "model/kernels/swiglu_cuda.h"
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
using bf16 = c10::BFloat16;
using cuda_common::load, cuda_common::rnd, cuda_common::store;

constexpr int kThreads = 256;

// As ATen's silu and silu_backward kernels compute them (accurate expf).
__device__ __forceinline__ float silu(float a) { return a / (1.f + expf(-a)); }
__device__ __forceinline__ float sigmoid(float a) { return 1.f / (1.f + expf(-a)); }

template <typename T, int N, bool kVec>
__global__ void forward_kernel(const T* __restrict__ h, T* __restrict__ y, int64_t rows, int64_t F) {
  const int64_t per_row = F / N;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * per_row) return;
  const int64_t r = i / per_row, c = (i % per_row) * N;
  float a[N], b[N], o[N];
  load<N, kVec>(h + r * 2 * F + c, a);
  load<N, kVec>(h + r * 2 * F + F + c, b);
#pragma unroll
  for (int j = 0; j < N; ++j) o[j] = rnd<T>(silu(a[j])) * b[j];
  store<N, kVec>(y + r * F + c, o);
}

template <typename T, int N, bool kVec>
__global__ void backward_kernel(const T* __restrict__ dy, const T* __restrict__ h, T* __restrict__ dh, int64_t rows,
                                int64_t F) {
  const int64_t per_row = F / N;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * per_row) return;
  const int64_t r = i / per_row, c = (i % per_row) * N;
  float g[N], a[N], b[N], da[N], db[N];
  load<N, kVec>(dy + r * F + c, g);
  load<N, kVec>(h + r * 2 * F + c, a);
  load<N, kVec>(h + r * 2 * F + F + c, b);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float sg = sigmoid(a[j]);
    const float s = rnd<T>(silu(a[j]));    // silu(gate) as the forward rounded it
    db[j] = g[j] * s;                      // d up
    const float gs = rnd<T>(g[j] * b[j]);  // d silu(gate), rounded as autograd's multiply backward
    da[j] = gs * sg * (1.f + a[j] * (1.f - sg));
  }
  store<N, kVec>(dh + r * 2 * F + c, da);
  store<N, kVec>(dh + r * 2 * F + F + c, db);
}

template <typename T>
bool vectorizable(int64_t F, const void* a, const void* b) {
  constexpr int n = 16 / sizeof(T);
  return F % n == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

#define VDT_SWIGLU_DISPATCH(t, ...) VDT_DISPATCH_FLOAT_BF16(t, T, "swiglu", __VA_ARGS__)

unsigned blocks(int64_t threads) { return static_cast<unsigned>((threads + kThreads - 1) / kThreads); }

}  // namespace

Tensor swiglu_forward(const Tensor& h_in) {
  TORCH_CHECK(h_in.dim() == 2 && h_in.size(1) % 2 == 0, "swiglu: expected h [rows, 2F], got ", h_in.sizes());
  const c10::cuda::CUDAGuard guard(h_in.device());
  const auto h = h_in.contiguous();
  const int64_t rows = h.size(0), F = h.size(1) / 2;
  auto y = at::empty({rows, F}, h.options());
  if (y.numel() == 0) return y;
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_SWIGLU_DISPATCH(h, [&] {
    constexpr int V = 16 / sizeof(T);
    if (vectorizable<T>(F, h.data_ptr(), y.data_ptr()))
      forward_kernel<T, V, true>
          <<<blocks(rows * F / V), kThreads, 0, stream>>>(h.data_ptr<T>(), y.data_ptr<T>(), rows, F);
    else
      forward_kernel<T, 1, false><<<blocks(rows * F), kThreads, 0, stream>>>(h.data_ptr<T>(), y.data_ptr<T>(), rows, F);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

Tensor swiglu_backward(const Tensor& dy_in, const Tensor& h_in) {
  const c10::cuda::CUDAGuard guard(h_in.device());
  const auto h = h_in.contiguous(), dy = dy_in.to(h.scalar_type()).contiguous();
  const int64_t rows = h.size(0), F = h.size(1) / 2;
  TORCH_CHECK(dy.dim() == 2 && dy.size(0) == rows && dy.size(1) == F, "swiglu: expected dy [", rows, ", ", F, "], got ",
              dy.sizes());
  auto dh = at::empty_like(h);
  if (dh.numel() == 0) return dh;
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_SWIGLU_DISPATCH(h, [&] {
    constexpr int V = 16 / sizeof(T);
    if (vectorizable<T>(F, h.data_ptr(), dy.data_ptr()) && vectorizable<T>(F, dh.data_ptr(), dh.data_ptr()))
      backward_kernel<T, V, true>
          <<<blocks(rows * F / V), kThreads, 0, stream>>>(dy.data_ptr<T>(), h.data_ptr<T>(), dh.data_ptr<T>(), rows, F);
    else
      backward_kernel<T, 1, false>
          <<<blocks(rows * F), kThreads, 0, stream>>>(dy.data_ptr<T>(), h.data_ptr<T>(), dh.data_ptr<T>(), rows, F);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dh;
}

}  // namespace vdt::kernels::cuda
