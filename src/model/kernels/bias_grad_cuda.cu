// CUDA kernels of bias_grad.h. Pass 1 (partial_kernel): block (x, s) takes the x-th tile of 32 * N columns and the
// s-th slice of rows; its 8 warps take every 8th row of the slice, each lane summing N columns in float32 (16-byte
// loads, kUnroll rows in flight), then the 8 warp sums are added in warp order through shared memory into one partial
// row. Pass 2 (finish_kernel): per 32 columns, 8 warps each add every 8th partial row, then the 8 sums in order, and
// the total is rounded to g's dtype once. S is picked for ~4 blocks per SM in pass 1; the partials ([S, C] float32) are
// small against g. Deterministic on a given device (fixed order everywhere).
#include "model/kernels/bias_grad_cuda.h"
#include "core/cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
using bf16 = c10::BFloat16;
using cuda_common::load;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kUnroll = 4;

template <typename T, int N, bool kVec>
__global__ void partial_kernel(const T* __restrict__ g, int64_t rows, int64_t C, int64_t rows_per_slice,
                               float* __restrict__ partial) {
  __shared__ float sums[kWarps][32 * N];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * 32 * N, c = tile + lane * N;
  const int64_t begin = blockIdx.y * rows_per_slice;
  const int64_t end = begin + rows_per_slice < rows ? begin + rows_per_slice : rows;
  float acc[N] = {};
  if (c < C) {
    int64_t r = begin + warp;
    for (; r + (kUnroll - 1) * kWarps < end; r += kUnroll * kWarps) {
      float v[kUnroll][N];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load<N, kVec>(g + (r + u * kWarps) * C + c, v[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < N; ++j) acc[j] += v[u][j];
    }
    for (; r < end; r += kWarps) {
      float v[N];
      load<N, kVec>(g + r * C + c, v);
#pragma unroll
      for (int j = 0; j < N; ++j) acc[j] += v[j];
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) sums[warp][lane * N + j] = acc[j];
  __syncthreads();
  for (int k = threadIdx.x; k < 32 * N; k += kThreads) {
    if (tile + k >= C) continue;
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += sums[w][k];
    partial[blockIdx.y * C + tile + k] = total;
  }
}

template <typename T>
__global__ void finish_kernel(const float* __restrict__ partial, int64_t slices, int64_t C, T* __restrict__ out) {
  __shared__ float sums[kWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float acc = 0.f;
  if (c < C)
    for (int64_t s = warp; s < slices; s += kWarps) acc += partial[s * C + c];
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && c < C) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += sums[w][lane];
    out[c] = static_cast<T>(total);
  }
}

// out [C] = the sum of partial [S, C]'s rows, in order
template <typename T>
void launch_finish(const Tensor& partial, Tensor& out, cudaStream_t stream) {
  const int64_t slices = partial.size(0), C = partial.size(1);
  finish_kernel<T><<<static_cast<unsigned>((C + 31) / 32), kThreads, 0, stream>>>(partial.data_ptr<float>(), slices, C,
                                                                                  out.data_ptr<T>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int N, bool kVec>
void launch(const Tensor& g, Tensor& out) {
  const int64_t rows = g.size(0), C = g.size(1);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t tiles = (C + 32 * N - 1) / (32 * N);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  // ~4 blocks per SM in pass 1 (enough 16-byte loads in flight to cover the memory latency), slices of >= 64 rows
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>((4 * sms + tiles - 1) / tiles, (rows + 63) / 64));
  const int64_t per = (rows + slices - 1) / slices;
  auto partial = at::empty({slices, C}, g.options().dtype(at::kFloat));
  partial_kernel<T, N, kVec>
      <<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)), kThreads, 0, stream>>>(
          g.data_ptr<T>(), rows, C, per, partial.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_finish<T>(partial, out, stream);
}

template <typename T>
void dispatch(const Tensor& g, Tensor& out) {
  constexpr int V = 16 / sizeof(T);
  if (g.size(1) % V == 0 && reinterpret_cast<uintptr_t>(g.data_ptr()) % 16 == 0)
    launch<T, V, true>(g, out);
  else
    launch<T, 1, false>(g, out);
}

}  // namespace

Tensor column_sum(const Tensor& g_in) {
  TORCH_CHECK(g_in.dim() == 2, "column_sum: expected g [N, C], got ", g_in.sizes());
  const c10::cuda::CUDAGuard guard(g_in.device());
  const auto g = g_in.contiguous();
  auto out = at::empty({g.size(1)}, g.options());
  if (g.size(1) == 0) return out;
  if (g.size(0) == 0) return out.zero_();
  if (g.scalar_type() == at::kFloat) {
    dispatch<float>(g, out);
  } else {
    TORCH_CHECK(g.scalar_type() == at::kBFloat16, "column_sum: the CUDA kernel takes float32 or bfloat16, got ",
                g.scalar_type());
    dispatch<bf16>(g, out);
  }
  return out;
}

Tensor column_sum_finish(const Tensor& partial_in, at::ScalarType dtype) {
  TORCH_CHECK(partial_in.dim() == 2 && partial_in.scalar_type() == at::kFloat && partial_in.is_cuda(),
              "column_sum_finish: expected float32 partial sums [S, C] on a CUDA device, got ", partial_in.sizes(), " ",
              partial_in.scalar_type(), " on ", partial_in.device());
  const c10::cuda::CUDAGuard guard(partial_in.device());
  const auto partial = partial_in.contiguous();
  auto out = at::empty({partial.size(1)}, partial.options().dtype(dtype));
  if (partial.size(1) == 0) return out;
  if (partial.size(0) == 0) return out.zero_();
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_FLOAT_BF16(out, T, "column_sum_finish", [&] { launch_finish<T>(partial, out, stream); });
  return out;
}

}  // namespace vdt::kernels::cuda
