// CUDA kernel of row_gather.h. gather_rows_backward: one thread per (output row, 8 columns); it walks the ids in order
// and adds the gradient rows that name its output row (float32), so each gradient element is read once by the one
// thread that owns its column pack for that row, and the result is deterministic.
#include "model/kernels/row_gather_cuda.h"
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
using cuda_common::load, cuda_common::store;

constexpr int kThreads = 128;

template <typename T, int N, bool kVec>
__global__ void gather_backward_kernel(const T* __restrict__ g, const int64_t* __restrict__ ids, int64_t n_ids,
                                       int64_t K, T* __restrict__ out) {
  const int64_t r = blockIdx.y;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (c >= K) return;
  float acc[N] = {};
  for (int64_t n = 0; n < n_ids; ++n) {
    if (ids[n] != r) continue;
    float v[N];
    load<N, kVec>(g + n * K + c, v);
#pragma unroll
    for (int j = 0; j < N; ++j) acc[j] += v[j];
  }
  store<N, kVec>(out + r * K + c, acc);
}

#define VDT_ROW_GATHER_DISPATCH(t, what, ...) VDT_DISPATCH_FLOAT_BF16(t, T, what, __VA_ARGS__)

// 16-byte packs when the width and both pointers allow (N elements of T make 16 bytes).
template <typename T>
bool vectorizable(int64_t width, const void* a, const void* b) {
  constexpr int n = 16 / sizeof(T);
  return width % n == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

}  // namespace

Tensor gather_rows_backward(const Tensor& g_in, const Tensor& ids_in, int64_t R) {
  TORCH_CHECK(g_in.dim() == 2 && ids_in.dim() == 1 && ids_in.size(0) == g_in.size(0) && R > 0 && R < 65536,
              "gather_rows_backward: expected g [N, K], ids [N] and 0 < R < 65536, got ", g_in.sizes(), ", ",
              ids_in.sizes(), " and R = ", R);
  const c10::cuda::CUDAGuard guard(g_in.device());
  const auto g = g_in.contiguous(), ids = ids_in.to(at::kLong).contiguous();
  const int64_t N = g.size(0), K = g.size(1);
  auto out = at::empty({R, K}, g.options());
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_ROW_GATHER_DISPATCH(g, "gather_rows_backward", [&] {
    constexpr int V = 16 / sizeof(T);
    const bool vec = vectorizable<T>(K, g.data_ptr(), out.data_ptr());
    const int n = vec ? V : 1;
    const dim3 grid(static_cast<unsigned>((K / n + kThreads - 1) / kThreads), static_cast<unsigned>(R));
    if (vec)
      gather_backward_kernel<T, V, true>
          <<<grid, kThreads, 0, stream>>>(g.data_ptr<T>(), ids.data_ptr<int64_t>(), N, K, out.data_ptr<T>());
    else
      gather_backward_kernel<T, 1, false>
          <<<grid, kThreads, 0, stream>>>(g.data_ptr<T>(), ids.data_ptr<int64_t>(), N, K, out.data_ptr<T>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace vdt::kernels::cuda
