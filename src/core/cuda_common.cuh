// Device helpers shared by vdt's CUDA kernel files (model/kernels/*_cuda.cu, optim/adamw_cuda.cu): rounding to a dtype
// as ATen's casts do, 16-byte packs, vector loads / stores as float32, deterministic block sums (one value or K at
// once), and on the host the float32 / bfloat16 dispatch and the check that this binary has a kernel image for a
// device. Not here: any op's kernel.
#pragma once
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

namespace vdt::cuda_common {

// v rounded to T and back (round to nearest even, as ATen's casts).
template <typename T>
__device__ __forceinline__ float rnd(float v) {
  return static_cast<float>(static_cast<T>(v));
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// N consecutive elements as float32: one 16-byte load when kVec, else element by element.
template <int N, bool kVec = true, typename T>
__device__ __forceinline__ void load(const T* p, float (&out)[N]) {
  if constexpr (kVec) {
    const auto pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = static_cast<float>(pk.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = static_cast<float>(p[k]);
  }
}

template <int N, bool kVec = true, typename T>
__device__ __forceinline__ void store(T* p, const float (&in)[N]) {
  if constexpr (kVec) {
    Pack<T, N> pk;
#pragma unroll
    for (int k = 0; k < N; ++k) pk.v[k] = static_cast<T>(in[k]);
    *reinterpret_cast<Pack<T, N>*>(p) = pk;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = static_cast<T>(in[k]);
  }
}

// Sum over the block, returned to every thread. Deterministic (fixed shuffle tree); blockDim.x a multiple of 32.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // `part` may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < warps ? part[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums over the block of K values at once, returned to every thread. Deterministic: a fixed shuffle tree per warp, the
// warp partials added in warp order. `part` is shared [K][32]; blockDim.x a multiple of 32.
template <int K>
__device__ __forceinline__ void block_sums(float (&v)[K], float (*part)[32]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // the previous call's readers are done with `part`
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) part[k][warp] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += part[k][w];
    v[k] = s;
  }
}

// Runs `...` (a lambda taking no arguments) with the type `Alias` naming float or c10::BFloat16 as t's dtype is
// float32 or bfloat16; any other dtype fails naming `what`. Returns what the lambda returns.
#define VDT_DISPATCH_FLOAT_BF16(t, Alias, what, ...)                                                            \
  [&] {                                                                                                         \
    if ((t).scalar_type() == c10::kFloat) {                                                                     \
      using Alias = float;                                                                                      \
      return __VA_ARGS__();                                                                                     \
    }                                                                                                           \
    TORCH_CHECK((t).scalar_type() == c10::kBFloat16, what, ": the CUDA kernels take float32 or bfloat16, got ", \
                (t).scalar_type());                                                                             \
    using Alias = c10::BFloat16;                                                                                \
    return __VA_ARGS__();                                                                                       \
  }()

// Whether this binary has an image of `kernel` that runs on CUDA device `device_index` (cached per kernel and device).
template <typename Kernel>
bool image_fits(int device_index, Kernel* kernel) {
  static std::mutex mu;
  static std::vector<int> known;  // -1 unknown, 0 no, 1 yes
  std::lock_guard<std::mutex> lock(mu);
  if (device_index < 0) return false;
  if (static_cast<int>(known.size()) <= device_index) known.resize(device_index + 1, -1);
  if (known[device_index] < 0) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
    cudaFuncAttributes attr;
    // Fails with cudaErrorInvalidDeviceFunction (or NoKernelImageForDevice) when no image fits this device.
    const auto err = cudaFuncGetAttributes(&attr, kernel);
    known[device_index] = err == cudaSuccess ? 1 : 0;
    if (err != cudaSuccess) (void)cudaGetLastError();  // clear the (non-sticky) error
  }
  return known[device_index] == 1;
}

}  // namespace vdt::cuda_common
