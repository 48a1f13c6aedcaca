// CUDA kernels of fp8_linear_cuda.h: the row-wise amax + quantize of an operand and the column-wise one with the
// transpose fused (the cast+transpose a column-major _scaled_mm operand needs). Correctness first: one thread block per
// row for the row-wise op (amax by a warp-shuffle + shared-memory block reduction); for the column-wise op one pass
// of column maxima (each block reduces a 32-column x 256-row patch, then one atomicMax per column on the float's bits,
// which order like the floats for values >= 0, NaN above +inf) and one pass of 32x32 tiles through shared memory
// (coalesced reads of t's rows, coalesced writes of q's rows). Every step is the one ATen takes in fp8_linear.cpp's
// fallback (IEEE division, NaN-propagating max and clamp, c10's round-to-nearest-even E4M3 conversion), so the two
// agree bit for bit. Built for TORCH_CUDA_ARCH_LIST / VDT_CUDA_ARCHITECTURES (default 90a: H100/H200).
#include "model/kernels/fp8_linear_cuda.h"
#include "model/kernels/cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
using fp8 = c10::Float8_e4m3fn;
using bf16 = c10::BFloat16;
constexpr int kRowThreads = 256;      // threads per block of the row-wise kernel (a multiple of 32)
constexpr int kTile = 32;             // tile width of the column-wise kernels (one warp across)
constexpr int kTileRows = 8;          // warps per tile block
constexpr int64_t kAmaxRows = 256;    // rows per block of the column-maximum pass

// max that keeps a NaN, as ATen's amax does
__device__ __forceinline__ float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

__device__ __forceinline__ float scale_of(float amax) {
  return (amax < kFp8AmaxFloor ? kFp8AmaxFloor : amax) * kFp8InvMax;  // a NaN stays NaN, as ATen's clamp_min
}

__device__ __forceinline__ fp8 quantize(float v, float scale) {
  float s = __fdiv_rn(v, scale);                                // IEEE division whatever the compile flags
  s = s > kFp8Max ? kFp8Max : (s < -kFp8Max ? -kFp8Max : s);  // a NaN passes, as ATen's clamp
  return fp8(s);
}

// Max over the block, returned to every thread; blockDim.x a multiple of 32.
__device__ float block_max(float v) {
  __shared__ float part[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < warps ? part[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One block per row r of t [R, C]; each thread takes N consecutive columns at a time (16-byte loads and 8-byte fp8
// stores when kVec: C a multiple of N and the row pointers aligned), the row read twice (amax, then quantize; the
// second read mostly from L2).
template <typename T, int N, bool kVec>
__global__ void quantize_rows_kernel(const T* __restrict__ t, fp8* __restrict__ q, float* __restrict__ scale,
                                     int64_t C) {
  const int64_t r = blockIdx.x;
  const T* row = t + r * C;
  float amax = 0.f;
  for (int64_t c = threadIdx.x * N; c < C; c += blockDim.x * N) {
    float v[N];
    common::load<N, kVec>(row + c, v);
#pragma unroll
    for (int j = 0; j < N; ++j) amax = nan_max(amax, fabsf(v[j]));
  }
  const float s = scale_of(block_max(amax));
  if (threadIdx.x == 0) scale[r] = s;
  fp8* out = q + r * C;
  for (int64_t c = threadIdx.x * N; c < C; c += blockDim.x * N) {
    float v[N];
    common::load<N, kVec>(row + c, v);
    common::Pack<fp8, N> pk;
#pragma unroll
    for (int j = 0; j < N; ++j) pk.v[j] = quantize(v[j], s);
    if constexpr (kVec) {
      *reinterpret_cast<common::Pack<fp8, N>*>(out + c) = pk;
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) out[c + j] = pk.v[j];
    }
  }
}

// Column maxima of t [R, C] into amax_bits [C] (zero-initialised): block (32, 8) over columns
// blockIdx.x * 32 + threadIdx.x and rows [blockIdx.y * kAmaxRows, + kAmaxRows).
template <typename T>
__global__ void col_amax_kernel(const T* __restrict__ t, int* __restrict__ amax_bits, int64_t R, int64_t C) {
  __shared__ float part[kTileRows][kTile];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kAmaxRows;
  const int64_t r1 = r0 + kAmaxRows < R ? r0 + kAmaxRows : R;
  float amax = 0.f;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) amax = nan_max(amax, fabsf(static_cast<float>(t[r * C + c])));
  part[threadIdx.y][threadIdx.x] = amax;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
#pragma unroll
    for (int k = 1; k < kTileRows; ++k) amax = nan_max(amax, part[k][threadIdx.x]);
    atomicMax(amax_bits + c, __float_as_int(amax));  // amax >= 0 (or a NaN with the sign bit clear)
  }
}

// q [C, Rp] from t [R, C] by 32x32 tiles: tile (blockIdx.x, blockIdx.y) covers rows r0 = blockIdx.x * 32 of t (columns
// of q) and columns c0 = blockIdx.y * 32 of t (rows of q); block (32, 8).
template <typename T>
__global__ void quantize_cols_kernel(const T* __restrict__ t, const int* __restrict__ amax_bits, fp8* __restrict__ q,
                                     float* __restrict__ scale, int64_t R, int64_t C, int64_t Rp) {
  __shared__ float tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {  // read along t's rows
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    tile[k][threadIdx.x] = r < R && c < C ? static_cast<float>(t[r * C + c]) : 0.f;
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {  // write along q's rows
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (c >= C) continue;
    const float s = scale_of(__int_as_float(amax_bits[c]));
    if (blockIdx.x == 0 && threadIdx.x == 0) scale[c] = s;
    if (r < Rp) q[c * Rp + r] = r < R ? quantize(tile[threadIdx.x][k], s) : fp8(0.f);
  }
}

void check_launch() { C10_CUDA_KERNEL_LAUNCH_CHECK(); }

void check_input(const Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.dim() == 2, name, ": expected a 2-D CUDA tensor, got ", t.sizes(), " on ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, name,
              ": the FP8 kernels take float32 or bfloat16, got ", t.scalar_type());
}

}  // namespace

bool fp8_device_supported(int device_index) {
  return common::image_fits(device_index, quantize_rows_kernel<float, 1, false>);
}

std::tuple<Tensor, Tensor> fp8_quantize_rows(const Tensor& t_in) {
  check_input(t_in, "fp8_quantize_rows");
  c10::cuda::CUDAGuard guard(t_in.device());
  const auto t = t_in.contiguous();
  const int64_t R = t.size(0), C = t.size(1);
  auto q = at::empty({R, C}, t.options().dtype(at::kFloat8_e4m3fn));
  auto scale = at::empty({R}, t.options().dtype(at::kFloat));
  if (R == 0) return {q, scale};
  TORCH_CHECK(R < (int64_t{1} << 31), "fp8_quantize_rows: ", R, " rows exceed the kernel's grid");
  const auto grid = static_cast<unsigned>(R);
  auto stream = at::cuda::getCurrentCUDAStream();
  // 16-byte loads: 4 float32 or 8 bfloat16 columns (their fp8 stores then 4- or 8-byte aligned too).
  const bool vec = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0 &&
                   C % (t.scalar_type() == at::kFloat ? 4 : 8) == 0;
  auto* qp = static_cast<fp8*>(q.data_ptr());
  if (t.scalar_type() == at::kFloat) {
    if (vec) quantize_rows_kernel<float, 4, true><<<grid, kRowThreads, 0, stream>>>(t.data_ptr<float>(), qp, scale.data_ptr<float>(), C);
    else quantize_rows_kernel<float, 1, false><<<grid, kRowThreads, 0, stream>>>(t.data_ptr<float>(), qp, scale.data_ptr<float>(), C);
  } else {
    if (vec) quantize_rows_kernel<bf16, 8, true><<<grid, kRowThreads, 0, stream>>>(t.data_ptr<bf16>(), qp, scale.data_ptr<float>(), C);
    else quantize_rows_kernel<bf16, 1, false><<<grid, kRowThreads, 0, stream>>>(t.data_ptr<bf16>(), qp, scale.data_ptr<float>(), C);
  }
  check_launch();
  return {q, scale};
}

std::tuple<Tensor, Tensor> fp8_quantize_cols(const Tensor& t_in, int64_t Rp) {
  check_input(t_in, "fp8_quantize_cols");
  c10::cuda::CUDAGuard guard(t_in.device());
  const auto t = t_in.contiguous();
  const int64_t R = t.size(0), C = t.size(1);
  TORCH_CHECK(Rp >= R, "fp8_quantize_cols: padded length ", Rp, " < rows ", R);
  auto q = at::empty({C, Rp}, t.options().dtype(at::kFloat8_e4m3fn));
  auto scale = at::empty({C}, t.options().dtype(at::kFloat));
  if (C == 0 || Rp == 0) return {q, scale};
  auto amax_bits = at::zeros({C}, t.options().dtype(at::kInt));
  const int64_t col_tiles = (C + kTile - 1) / kTile, amax_blocks = (R + kAmaxRows - 1) / kAmaxRows;
  const int64_t row_tiles = (Rp + kTile - 1) / kTile;
  TORCH_CHECK(col_tiles <= 65535 && amax_blocks <= 65535, "fp8_quantize_cols: [", R, ", ", C,
              "] exceeds the kernels' grid (at most 2,097,120 columns and 16,776,960 rows)");
  auto stream = at::cuda::getCurrentCUDAStream();
  const dim3 block(kTile, kTileRows);
  const dim3 amax_grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(amax_blocks));
  const dim3 tile_grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles));
  if (t.scalar_type() == at::kFloat) {
    if (R > 0) col_amax_kernel<float><<<amax_grid, block, 0, stream>>>(t.data_ptr<float>(), amax_bits.data_ptr<int>(), R, C);
    check_launch();
    quantize_cols_kernel<float><<<tile_grid, block, 0, stream>>>(t.data_ptr<float>(), amax_bits.data_ptr<int>(),
                                                                 static_cast<fp8*>(q.data_ptr()), scale.data_ptr<float>(), R, C, Rp);
  } else {
    if (R > 0) col_amax_kernel<bf16><<<amax_grid, block, 0, stream>>>(t.data_ptr<bf16>(), amax_bits.data_ptr<int>(), R, C);
    check_launch();
    quantize_cols_kernel<bf16><<<tile_grid, block, 0, stream>>>(t.data_ptr<bf16>(), amax_bits.data_ptr<int>(),
                                                                static_cast<fp8*>(q.data_ptr()), scale.data_ptr<float>(), R, C, Rp);
  }
  check_launch();
  return {q, scale};
}

}  // namespace vdt::kernels::cuda
