// CUDA kernels of fp8_linear_cuda.h: the row-wise amax + quantize of an operand and the column-wise one with the
// transpose fused (the cast+transpose a column-major _scaled_mm operand needs).
// Row-wise: rows of up to 16 x 32 loads of 16 bytes (4096 bfloat16) one warp each, the row held in registers (amax by
// warp shuffles, one read); wider or unaligned rows one thread block each (amax by a warp-shuffle + shared-memory block
// reduction, the row read twice, as many threads as make every thread's share of loads equal: row_threads).
// Column-wise, t [R, C] -> q [C, Rp], built to run near memory bandwidth (it quantizes every frozen weight each step):
//   1. column maxima: each block reduces 32 x N columns (N = 8 bfloat16 or 4 float32: one 16-byte load a thread, a
//      warp on 512 contiguous bytes of a row) by 128 rows in registers, then shared memory, then one atomicMax per
//      column on the float's bits, which order like the floats for values >= 0 (NaN, sign clear, above +inf);
//   2. quantize + transpose by tiles of 128 rows x 64 columns of t: 16-byte loads along t's rows (4 rows x N columns a
//      thread), each column's scale and its reciprocal computed once per tile, the 4 rows' E4M3 bytes of a column
//      packed into one word of q's row in registers, an XOR-swizzled shared-memory tile (no bank conflicts on either
//      side), 16-byte stores along q's rows (4- or 1-byte ones when Rp is not a multiple of 16 or of 4).
// Without 16-byte alignment or with C not a multiple of N both passes load one element at a time. Every step gives
// what ATen's in fp8_linear.cpp's fallback gives, bit for bit: IEEE division (__fdiv_rn, or in the column-wise
// kernel its own fast path with the divisor's half hoisted, recip_of), NaN-propagating max and clamp, c10's
// round-to-nearest-even E4M3 conversion (or the hardware's saturating one, which agrees with it on every non-NaN).
// Built for TORCH_CUDA_ARCH_LIST / VDT_CUDA_ARCHITECTURES (default 90a: H100/H200).
#include "model/kernels/fp8_linear_cuda.h"
#include "core/cuda_common.cuh"
#include "model/kernels/bias_grad_cuda.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
using fp8 = c10::Float8_e4m3fn;
using bf16 = c10::BFloat16;
constexpr int kRowThreads = 512;      // most threads per block of the row-wise kernel (a multiple of 32)
constexpr int kWarpRows = 8;          // rows (warps) per block of the warp-per-row kernel
constexpr int kAmaxWarps = 8;         // warps per block of the column-maximum pass (each on its own rows)
constexpr int64_t kAmaxRows = 128;    // rows per block of the column-maximum pass (more when the grid needs it)
constexpr int kColTileRows = 128;     // rows of t per tile of the column-wise quantize (a 128-byte span of a q row)
constexpr int kColTileCols = 64;      // columns of t per tile (rows of q)
constexpr int kColThreads = 256;      // threads per tile block

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
  __syncthreads();  // `part` may still be read by the previous row's call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < warps ? part[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// v / s by a column's scale s at the cost of a multiply and two FMAs a value. __fdiv_rn compiles to y0 = MUFU.RCP(s),
// y = y0 + y0 (1 - s y0), q0 = v y, q = q0 + y (v - s q0), plus FCHK(v, s), which sends extreme exponent pairs to a
// slow path; here the part that depends on s alone (recip_of) is computed once per column. Where FCHK keeps the fast
// path the result is __fdiv_rn's bit for bit. The pairs it would divert have |v| tiny against s (s lies in
// [1e-12/448, FLT_MAX/448] and |v| <= 448 s: no overflow is possible), and there the quotient may differ in its last
// bits but not in its E4M3 byte, whose sign copysignf keeps from v (-0 included): checked on an H200 against
// quantize() for every bfloat16 amax x every bfloat16 |v| <= amax (1.07e9 pairs) and 2.2e9 random float32 pairs.
__device__ __forceinline__ float recip_of(float s) {
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(s));
  return __fmaf_rn(y0, __fmaf_rn(-s, y0, 1.f), y0);
}
__device__ __forceinline__ float div_by(float v, float s, float y) {
  const float q0 = __fmul_rn(v, y);
  return copysignf(__fmaf_rn(y, __fmaf_rn(-s, q0, v), q0), v);
}

// e4m3 bytes of a / s (low byte) and b / s (high byte) for a finite scale s (y = recip_of(s)): the saturating
// round-to-nearest-even conversion (one instruction on sm_89+) equals quantize()'s clamp + c10 conversion for every
// quotient that is not a NaN (checked over all 2^32 float32 patterns against cuda_fp8.h's host path), and with s
// finite no quotient is a NaN: s is finite only when every value of its column is.
__device__ __forceinline__ uint32_t e4m3x2(float a, float b, float s, float y) {
  return __nv_cvt_float2_to_fp8x2(make_float2(div_by(a, s, y), div_by(b, s, y)), __NV_SATFINITE, __NV_E4M3);
}

// One block per row r of t [R, C] (a block takes every gridDim.x-th row); each thread takes N consecutive columns at a
// time (16-byte loads and 8-byte fp8 stores when kVec: C a multiple of N and the row pointers aligned), the row read
// twice (amax, then quantize; the second read mostly from L1). With kVec and a finite scale the quotients go through the
// column kernel's conversion (the row's reciprocal once, two values per saturating cvt: e4m3x2, the same bytes as
// quantize()); a row with a NaN or inf takes quantize() value by value. kColMax: the maxima of |t| over each column on
// the way, into amax_bits [C] (zero-initialised): a thread owns the same columns in every row, keeps their maxima's
// float bits in its own shared-memory slots ([round][element][thread]: a warp's lanes on consecutive words), and after
// the last row the block max-es them into amax_bits, one atomicMax a column (bits of values >= 0 order like the floats;
// a NaN, sign clear, above +inf).
template <typename T, int N, bool kVec, bool kColMax>
__global__ void quantize_rows_kernel(const T* __restrict__ t, fp8* __restrict__ q, float* __restrict__ scale,
                                     int* __restrict__ amax_bits, int64_t R, int64_t C) {
  extern __shared__ int col_amax_slots[];  // kColMax: rounds x N x blockDim.x
  const int64_t per_round = static_cast<int64_t>(blockDim.x) * N;
  if constexpr (kColMax) {
    const int64_t slots = (C + per_round - 1) / per_round * per_round;
    for (int64_t i = threadIdx.x; i < slots; i += blockDim.x) col_amax_slots[i] = 0;  // this thread's own slots
  }
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* row = t + r * C;
    float amax = 0.f;
    int64_t k = 0;  // the round
    for (int64_t c = threadIdx.x * N; c < C; c += per_round, ++k) {
      float v[N];
      cuda_common::load<N, kVec>(row + c, v);
#pragma unroll
      for (int j = 0; j < N; ++j) amax = nan_max(amax, fabsf(v[j]));
      if constexpr (kColMax) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
          int& m = col_amax_slots[(k * N + j) * blockDim.x + threadIdx.x];
          m = max(m, __float_as_int(fabsf(v[j])));
        }
      }
    }
    const float s = scale_of(block_max(amax));
    if (threadIdx.x == 0) scale[r] = s;
    fp8* out = q + r * C;
    const bool fast = kVec && N % 2 == 0 && isfinite(s);  // the same for the whole block
    const float y = fast ? recip_of(s) : 0.f;
    for (int64_t c = threadIdx.x * N; c < C; c += per_round) {
      float v[N];
      cuda_common::load<N, kVec>(row + c, v);
      cuda_common::Pack<fp8, N> pk;
      if (fast) {
#pragma unroll
        for (int j = 0; j + 1 < N; j += 2) {
          const uint32_t two = e4m3x2(v[j], v[j + 1], s, y);
          pk.v[j].x = static_cast<uint8_t>(two & 0xffu);
          pk.v[j + 1].x = static_cast<uint8_t>(two >> 8);
        }
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) pk.v[j] = quantize(v[j], s);
      }
      if constexpr (kVec) {
        *reinterpret_cast<cuda_common::Pack<fp8, N>*>(out + c) = pk;
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) out[c + j] = pk.v[j];
      }
    }
  }
  if constexpr (kColMax) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {  // column c: round c / per_round, thread (c % per_round) / N
      const int64_t k = c / per_round, in_round = c % per_round;
      const int m = col_amax_slots[(k * N + in_round % N) * blockDim.x + in_round / N];
      if (m != 0) atomicMax(amax_bits + c, m);
    }
  }
}

// Rows of at most 32 x V loads of N columns (16 bytes each; C a multiple of N, aligned), one warp per row (a warp takes
// every (gridDim.x * kWarpRows)-th row), kWarpRows warps a block: the row's loads all in flight at once and held in
// registers between the amax and the quantize (one read of the row), the amax by warp shuffles, no block barrier. The
// block-per-row kernel above read the row twice around a block reduction and kept little in flight (~2.1 TB/s on the
// 5B SFT step's operands). Values as quantize_rows_kernel. kColMax (bfloat16): the maxima of |t| over each column on
// the way, into amax_bits [C] (zero-initialised): a lane owns the same columns in every row and keeps their maxima in
// registers as bfloat16 pairs (|v| of a bfloat16 is one, so the maxima are exact; __hmax2_nan keeps a NaN); after the
// last row the block's warps meet in shared memory and the block max-es its maxima into amax_bits, one atomicMax a
// column (on the float bits, as quantize_rows_kernel).
template <typename T, int N, int V, bool kColMax>
__global__ void __launch_bounds__(32 * kWarpRows)
    quantize_rows_warp_kernel(const T* __restrict__ t, fp8* __restrict__ q, float* __restrict__ scale,
                              int* __restrict__ amax_bits, int64_t R, int64_t C) {
  static_assert(!kColMax || (std::is_same_v<T, bf16> && N == 8), "column maxima: bfloat16 rows in 16-byte loads");
  extern __shared__ int col_amax_slots[];  // kColMax: [C], the block's column maxima (float bits)
  const int lane = threadIdx.x % 32;
  __nv_bfloat162 cmax[kColMax ? V : 1][N / 2];
  if constexpr (kColMax) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) col_amax_slots[c] = 0;
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int k = 0; k < N / 2; ++k) cmax[i][k] = __float2bfloat162_rn(0.f);
  }
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32; r < R;
       r += static_cast<int64_t>(gridDim.x) * kWarpRows) {  // the whole warp: r is the same for its lanes
    const T* row = t + r * C;
    cuda_common::Pack<T, N> raw[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t c = (static_cast<int64_t>(i) * 32 + lane) * N;
      if (c < C) raw[i] = *reinterpret_cast<const cuda_common::Pack<T, N>*>(row + c);
    }
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if ((static_cast<int64_t>(i) * 32 + lane) * N >= C) continue;
#pragma unroll
      for (int j = 0; j < N; ++j) amax = nan_max(amax, fabsf(static_cast<float>(raw[i].v[j])));
      if constexpr (kColMax) {
        const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[i]);
#pragma unroll
        for (int k = 0; k < N / 2; ++k) cmax[i][k] = __hmax2_nan(cmax[i][k], __habs2(pairs[k]));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = scale_of(amax);
    if (lane == 0) scale[r] = s;
    const bool fast = isfinite(s);  // the same for the whole warp
    const float y = fast ? recip_of(s) : 0.f;
    fp8* out = q + r * C;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t c = (static_cast<int64_t>(i) * 32 + lane) * N;
      if (c >= C) continue;
      cuda_common::Pack<fp8, N> pk;
      if (fast) {
#pragma unroll
        for (int j = 0; j < N; j += 2) {
          const uint32_t two =
              e4m3x2(static_cast<float>(raw[i].v[j]), static_cast<float>(raw[i].v[j + 1]), s, y);
          pk.v[j].x = static_cast<uint8_t>(two & 0xffu);
          pk.v[j + 1].x = static_cast<uint8_t>(two >> 8);
        }
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) pk.v[j] = quantize(static_cast<float>(raw[i].v[j]), s);
      }
      *reinterpret_cast<cuda_common::Pack<fp8, N>*>(out + c) = pk;
    }
  }
  if constexpr (kColMax) {
    __syncthreads();  // the slots' zeros
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t c = (static_cast<int64_t>(i) * 32 + lane) * N;
      if (c >= C) continue;
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        const float2 m = __bfloat1622float2(cmax[i][k]);
        atomicMax(col_amax_slots + c + 2 * k, __float_as_int(m.x));
        atomicMax(col_amax_slots + c + 2 * k + 1, __float_as_int(m.y));
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      if (col_amax_slots[c] != 0) atomicMax(amax_bits + c, col_amax_slots[c]);
  }
}

// Column maxima of t [R, C] into amax_bits [C] (zero-initialised). Block (32, kAmaxWarps): thread x takes the N
// consecutive columns (blockIdx.x * 32 + x) * N (a 16-byte load when kVec: a warp reads 512 contiguous bytes of a row),
// warp y every kAmaxWarps-th row of [blockIdx.y * rows, + rows); the warps' maxima meet in shared memory, then one
// atomicMax per column on the float's bits, which order like the floats for values >= 0 (a NaN, sign clear, above +inf).
template <typename T, int N, bool kVec>
__global__ void __launch_bounds__(32 * kAmaxWarps)
    col_amax_kernel(const T* __restrict__ t, int* __restrict__ amax_bits, int64_t R, int64_t C, int64_t rows) {
  __shared__ cuda_common::Pack<float, N> part[kAmaxWarps][32];
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * N;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows, r1 = r0 + rows < R ? r0 + rows : R;
  cuda_common::Pack<float, N> m;
#pragma unroll
  for (int j = 0; j < N; ++j) m.v[j] = 0.f;
  if (c < C) {  // with kVec, C is a multiple of N: all N columns are in
    constexpr int kStep = kAmaxWarps, kBatch = 4;  // 4 rows' loads in flight per thread
    int64_t r = r0 + threadIdx.y;
    for (; r + (kBatch - 1) * kStep < r1; r += kBatch * kStep) {
      float v[kBatch][N];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) cuda_common::load<N, kVec>(t + (r + u * kStep) * C + c, v[u]);
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
#pragma unroll
        for (int j = 0; j < N; ++j) m.v[j] = nan_max(m.v[j], fabsf(v[u][j]));
    }
    for (; r < r1; r += kStep) {
      float v[N];
      cuda_common::load<N, kVec>(t + r * C + c, v);
#pragma unroll
      for (int j = 0; j < N; ++j) m.v[j] = nan_max(m.v[j], fabsf(v[j]));
    }
  }
  part[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32 * N;
  for (int i = threadIdx.y * 32 + threadIdx.x; i < 32 * N; i += 32 * kAmaxWarps) {  // column c0 + i
    float a = reinterpret_cast<const float*>(part[0])[i];
#pragma unroll
    for (int k = 1; k < kAmaxWarps; ++k) a = nan_max(a, reinterpret_cast<const float*>(part[k])[i]);
    if (c0 + i < C) atomicMax(amax_bits + c0 + i, __float_as_int(a));  // a >= 0 (or a NaN with the sign bit clear)
  }
}

// q [C, Rp] from t [R, C] by tiles of kColTileRows rows x kColTileCols columns of t (q: 64 rows of 128 bytes), one
// block of kColThreads each: blockIdx.x the column tile (the blocks in flight cover whole spans of t's rows),
// blockIdx.y the row tile; rows R..Rp-1 are zeros.
// 1. Loads: each thread takes sub-blocks of 4 rows x N columns, one N-wide load per row (16 bytes when kVec); a warp
//    covers 4 rows' worth of 8 column groups (128 contiguous bytes of a row per load when kVec).
// 2. Each sub-block is quantized by its columns' scales (and their reciprocals, computed once per tile column into
//    shared memory) and transposed in registers: per column, the 4 rows' bytes make one 32-bit word of q's row, stored
//    into the tile [64 q rows][32 words]. The word index is XOR-swizzled by the column group (bits 2-4), so a warp's
//    32 stores hit 32 banks and each 16-byte chunk of a q row stays contiguous.
// 3. Stores along q's rows, `store_bytes` (16, 4 or 1: the widest that divides Rp) a thread, conflict-free reads of
//    the tile, each warp on whole 128-byte runs of q's rows (32-byte runs with 1-byte stores).
// A column whose scale is not finite (a NaN or inf in it) takes quantize() value by value, as the ATen twin.
// kSum: the tile's column sums on the way (float32; per 4-row sub-block, then the 32 sub-blocks of a column in order)
// into row blockIdx.y of partial [row tiles, C], for column_sum_finish (the bias gradient without another read of t).
template <typename T, int N, bool kVec, bool kSum>
__global__ void __launch_bounds__(kColThreads)
    quantize_cols_kernel(const T* __restrict__ t, const int* __restrict__ amax_bits, fp8* __restrict__ q,
                         float* __restrict__ scale, float* __restrict__ partial, int64_t R, int64_t C, int64_t Rp,
                         int store_bytes) {
  constexpr int kWords = kColTileRows / 4;              // 32-bit words of a tile's q row
  constexpr int kGroups = kColTileCols / N;             // N-column groups of a tile's t row
  constexpr int kSpans = kGroups / 8;                   // warps side by side across a tile row (8 groups each)
  constexpr int kSub = kWords * kGroups / kColThreads;  // 4 x N sub-blocks per thread
  static_assert(kWords == 32 && kGroups % 8 == 0 && kWords * kGroups % kColThreads == 0, "tile geometry");
  __shared__ __align__(16) uint32_t tile[kColTileCols][kWords];
  __shared__ float col_scale[kColTileCols], col_recip[kColTileCols];
  __shared__ float col_sum[kSum ? kWords : 1][kColTileCols + 1];  // kSum: [4-row sub-block][column], padded a word
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColTileCols, r0 = static_cast<int64_t>(blockIdx.y) * kColTileRows;
  const int tid = threadIdx.x;
  if (tid < kColTileCols && c0 + tid < C) {
    const float s = scale_of(__int_as_float(amax_bits[c0 + tid]));
    col_scale[tid] = s;
    col_recip[tid] = isfinite(s) ? recip_of(s) : 0.f;
    if (blockIdx.y == 0) scale[c0 + tid] = s;
  }
  // where word `word` of the tile's q row cl lives: bits 2-4 flipped by the row's column group (cl / N) % 8
  auto slot = [](int cl, int word) { return word ^ (((cl / N) % 8) << 2); };
  // sub-block i of this thread: column group cg, rows r0 + 4 rg .. + 3
  auto coords = [tid](int i, int& cg, int& rg) {
    const int s = i * kColThreads + tid, w = s / 32, lane = s % 32;
    cg = (w % kSpans) * 8 + lane % 8;
    rg = (w / kSpans) * 4 + lane / 8;
  };
  float v[kSub][4][N];
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    int cg, rg;
    coords(i, cg, rg);
    const int64_t c = c0 + cg * N;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = r0 + rg * 4 + j;
      if (r < R && c < C) {  // with kVec, C is a multiple of N: all N columns are in
        cuda_common::load<N, kVec>(t + r * C + c, v[i][j]);
      } else {
#pragma unroll
        for (int k = 0; k < N; ++k) v[i][j][k] = 0.f;
      }
    }
  }
  if constexpr (kSum) {  // every (sub-block, column) slot once: rows past R and columns past C loaded as 0
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      int cg, rg;
      coords(i, cg, rg);
#pragma unroll
      for (int k = 0; k < N; ++k) col_sum[rg][cg * N + k] = ((v[i][0][k] + v[i][1][k]) + v[i][2][k]) + v[i][3][k];
    }
  }
  __syncthreads();  // col_scale, col_recip, col_sum
  if constexpr (kSum) {
    if (tid < kColTileCols && c0 + tid < C) {
      float total = 0.f;
      for (int g = 0; g < kWords; ++g) total += col_sum[g][tid];
      partial[blockIdx.y * C + c0 + tid] = total;
    }
  }
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    int cg, rg;
    coords(i, cg, rg);
    if (c0 + cg * N >= C) continue;  // with kVec, C is a multiple of N: all N columns are in
    const float* s = col_scale + cg * N;
    const float* y = col_recip + cg * N;
    uint32_t words[N];  // q row cg * N + k, bytes of rows r0 + 4 rg .. + 3
    bool finite = true;
#pragma unroll
    for (int k = 0; k < N; ++k) finite &= isfinite(s[k]);
    if (finite) {  // padding rows loaded as 0 quantize to 0
#pragma unroll
      for (int k = 0; k < N; ++k)
        words[k] = e4m3x2(v[i][0][k], v[i][1][k], s[k], y[k]) | e4m3x2(v[i][2][k], v[i][3][k], s[k], y[k]) << 16;
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        words[k] = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (r0 + rg * 4 + j < R) words[k] |= static_cast<uint32_t>(quantize(v[i][j][k], s[k]).x) << (8 * j);
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) tile[cg * N + k][slot(cg * N + k, rg)] = words[k];
  }
  __syncthreads();
  auto* out = reinterpret_cast<uint8_t*>(q);
  if (store_bytes == 16) {
    constexpr int kChunks = kWords / 4;  // 16-byte chunks of a tile's q row
    for (int i = tid; i < kColTileCols * kChunks; i += kColThreads) {
      const int cl = i / kChunks, m = i % kChunks;
      const int64_t c = c0 + cl, r = r0 + m * 16;
      if (c < C && r < Rp)
        *reinterpret_cast<uint4*>(out + c * Rp + r) = *reinterpret_cast<const uint4*>(&tile[cl][slot(cl, m * 4)]);
    }
  } else if (store_bytes == 4) {
    for (int i = tid; i < kColTileCols * kWords; i += kColThreads) {
      const int cl = i / kWords, wd = i % kWords;
      const int64_t c = c0 + cl, r = r0 + wd * 4;
      if (c < C && r < Rp) *reinterpret_cast<uint32_t*>(out + c * Rp + r) = tile[cl][slot(cl, wd)];
    }
  } else {
    for (int i = tid; i < kColTileCols * kColTileRows; i += kColThreads) {
      const int cl = i / kColTileRows, b = i % kColTileRows;
      const int64_t c = c0 + cl, r = r0 + b;
      if (c < C && r < Rp) out[c * Rp + r] = static_cast<uint8_t>(tile[cl][slot(cl, b / 4)] >> (8 * (b % 4)));
    }
  }
}

void check_launch() { C10_CUDA_KERNEL_LAUNCH_CHECK(); }

// Threads per block of the row-wise kernel for rows of C columns in loads of n: every thread the same number of loads
// (a row of 3072 bfloat16, 384 loads: 384 threads of one load, where 256 threads left half of them with two), at most
// kRowThreads loads' worth of threads per round (a multiple of 32, at least one warp).
int row_threads(int64_t C, int64_t n) {
  const int64_t loads = (C + n - 1) / n;
  const int64_t rounds = (loads + kRowThreads - 1) / kRowThreads;  // loads per thread
  const int64_t threads = (loads + rounds - 1) / rounds;
  return static_cast<int>(std::max<int64_t>(32, (threads + 31) / 32 * 32));
}

// Blocks for a kernel that loops over `units` (rows, or warps' rows): every unit its own block up to what is resident
// at once (the column maxima's atomics then come once per resident block, not per row).
template <typename Kernel>
unsigned resident_grid(Kernel* kernel, int threads, size_t smem, int64_t units) {
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(units, int64_t{std::max(per_sm, 1)} * sms)));
}

// Column maxima of t [R, C] into amax_bits [C] (zero-initialised): col_amax_kernel's launch.
template <typename T, int N, bool kVec>
void launch_col_amax(const T* t, int* amax_bits, int64_t R, int64_t C, cudaStream_t stream) {
  if (R == 0 || C == 0) return;
  const int64_t rows = std::max(kAmaxRows, (R + 65534) / 65535);  // the row blocks within the grid's y limit
  const int64_t col_blocks = (C + 32 * N - 1) / (32 * N);
  TORCH_CHECK(col_blocks < (int64_t{1} << 31), "fp8 column maxima: ", C, " columns exceed the kernel's grid");
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>((R + rows - 1) / rows));
  col_amax_kernel<T, N, kVec><<<grid, dim3(32, kAmaxWarps), 0, stream>>>(t, amax_bits, R, C, rows);
  check_launch();
}

// The warp-per-row kernel with the fewest loads a lane (4, 8, 12 or 16) that covers a row of C columns in loads of N;
// kColMax: looping over the rows with as many blocks as are resident, the block's column maxima in shared memory.
template <typename T, int N, bool kColMax, int V>
void launch_rows_warp_v(cudaStream_t stream, const T* t, fp8* q, float* scale, int* amax_bits, int64_t R, int64_t C) {
  auto* kernel = quantize_rows_warp_kernel<T, N, V, kColMax>;
  const int threads = 32 * kWarpRows;
  const size_t smem = kColMax ? C * sizeof(int) : 0;
  const int64_t blocks = (R + kWarpRows - 1) / kWarpRows;
  const unsigned grid = kColMax ? resident_grid(kernel, threads, smem, blocks) : static_cast<unsigned>(blocks);
  kernel<<<grid, threads, smem, stream>>>(t, q, scale, amax_bits, R, C);
  check_launch();
}
template <typename T, int N, bool kColMax>
void launch_rows_warp(cudaStream_t stream, const T* t, fp8* q, float* scale, int* amax_bits, int64_t R, int64_t C) {
  const int64_t per_lane = (C + 32 * N - 1) / (32 * N);
  if (per_lane <= 4) launch_rows_warp_v<T, N, kColMax, 4>(stream, t, q, scale, amax_bits, R, C);
  else if (per_lane <= 8) launch_rows_warp_v<T, N, kColMax, 8>(stream, t, q, scale, amax_bits, R, C);
  else if (per_lane <= 12) launch_rows_warp_v<T, N, kColMax, 12>(stream, t, q, scale, amax_bits, R, C);
  else launch_rows_warp_v<T, N, kColMax, 16>(stream, t, q, scale, amax_bits, R, C);
}

// The block-per-row kernel; kColMax: looping over the rows with as many blocks as are resident, each thread's column
// maxima in shared memory (a rounds x N x threads slot array, opted in past 48 KiB).
template <typename T, int N, bool kVec, bool kColMax>
void launch_rows_block(cudaStream_t stream, const T* t, fp8* q, float* scale, int* amax_bits, int64_t R, int64_t C,
                       size_t smem) {
  auto* kernel = quantize_rows_kernel<T, N, kVec, kColMax>;
  const int threads = row_threads(C, N);
  if (smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const unsigned grid = kColMax ? resident_grid(kernel, threads, smem, R) : static_cast<unsigned>(R);
  kernel<<<grid, threads, smem, stream>>>(t, q, scale, amax_bits, R, C);
  check_launch();
}

void check_input(const Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.dim() == 2, name, ": expected a 2-D CUDA tensor, got ", t.sizes(), " on ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, name,
              ": the FP8 kernels take float32 or bfloat16, got ", t.scalar_type());
}

// col_amax's data as the kernels' amax_bits (float32 [C] >= 0 on t's device, or undefined: nullptr).
int* amax_bits_of(const Tensor& col_amax, const Tensor& t, const char* name) {
  if (!col_amax.defined()) return nullptr;
  TORCH_CHECK(col_amax.scalar_type() == at::kFloat && col_amax.dim() == 1 && col_amax.size(0) == t.size(1) &&
                  col_amax.is_contiguous() && col_amax.device() == t.device(),
              name, ": col_amax must be a contiguous float32 [", t.size(1), "] on ", t.device(), ", got ",
              col_amax.sizes(), " ", col_amax.scalar_type(), " on ", col_amax.device());
  return reinterpret_cast<int*>(col_amax.data_ptr<float>());
}

}  // namespace

bool fp8_device_supported(int device_index) {
  return cuda_common::image_fits(device_index, quantize_rows_kernel<float, 1, false, false>);
}

std::tuple<Tensor, Tensor> fp8_quantize_rows(const Tensor& t_in, const Tensor& col_amax) {
  check_input(t_in, "fp8_quantize_rows");
  c10::cuda::CUDAGuard guard(t_in.device());
  const auto t = t_in.contiguous();
  const int64_t R = t.size(0), C = t.size(1);
  int* bits = amax_bits_of(col_amax, t, "fp8_quantize_rows");
  auto q = at::empty({R, C}, t.options().dtype(at::kFloat8_e4m3fn));
  auto scale = at::empty({R}, t.options().dtype(at::kFloat));
  if (R == 0) return {q, scale};
  TORCH_CHECK(R < (int64_t{1} << 31), "fp8_quantize_rows: ", R, " rows exceed the kernel's grid");
  auto stream = at::cuda::getCurrentCUDAStream();
  const bool bf = t.scalar_type() == at::kBFloat16;
  // 16-byte loads: 4 float32 or 8 bfloat16 columns (their fp8 stores then 4- or 8-byte aligned too).
  const int64_t n_vec = bf ? 8 : 4;
  const bool vec = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0 && C % n_vec == 0;
  auto* qp = static_cast<fp8*>(q.data_ptr());
  auto* sp = scale.data_ptr<float>();
  const int64_t n = vec ? n_vec : 1;
  // the column maxima fused for bfloat16 (the block kernel's slots within shared memory); else col_amax_kernel after
  const int64_t threads = row_threads(C, n), per_round = threads * n;
  const size_t block_smem = static_cast<size_t>((C + per_round - 1) / per_round * per_round) * sizeof(int);
  const bool warp = vec && (C + 32 * n - 1) / (32 * n) <= 16;  // a warp per row: up to 16 loads a lane
  const bool fuse = bits && bf && (warp || block_smem <= 200 * 1024);
  if (warp) {
    if (!bf) launch_rows_warp<float, 4, false>(stream, t.data_ptr<float>(), qp, sp, nullptr, R, C);
    else if (fuse) launch_rows_warp<bf16, 8, true>(stream, t.data_ptr<bf16>(), qp, sp, bits, R, C);
    else launch_rows_warp<bf16, 8, false>(stream, t.data_ptr<bf16>(), qp, sp, nullptr, R, C);
  } else if (!bf) {
    if (vec) launch_rows_block<float, 4, true, false>(stream, t.data_ptr<float>(), qp, sp, nullptr, R, C, 0);
    else launch_rows_block<float, 1, false, false>(stream, t.data_ptr<float>(), qp, sp, nullptr, R, C, 0);
  } else if (fuse) {
    if (vec) launch_rows_block<bf16, 8, true, true>(stream, t.data_ptr<bf16>(), qp, sp, bits, R, C, block_smem);
    else launch_rows_block<bf16, 1, false, true>(stream, t.data_ptr<bf16>(), qp, sp, bits, R, C, block_smem);
  } else {
    if (vec) launch_rows_block<bf16, 8, true, false>(stream, t.data_ptr<bf16>(), qp, sp, nullptr, R, C, 0);
    else launch_rows_block<bf16, 1, false, false>(stream, t.data_ptr<bf16>(), qp, sp, nullptr, R, C, 0);
  }
  if (bits && !fuse) {
    const bool aligned = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && C % n_vec == 0;
    if (!bf) {
      if (aligned) launch_col_amax<float, 4, true>(t.data_ptr<float>(), bits, R, C, stream);
      else launch_col_amax<float, 1, false>(t.data_ptr<float>(), bits, R, C, stream);
    } else {
      if (aligned) launch_col_amax<bf16, 8, true>(t.data_ptr<bf16>(), bits, R, C, stream);
      else launch_col_amax<bf16, 1, false>(t.data_ptr<bf16>(), bits, R, C, stream);
    }
  }
  return {q, scale};
}

std::tuple<Tensor, Tensor, Tensor> fp8_quantize_cols(const Tensor& t_in, int64_t Rp, const Tensor& col_amax,
                                                     bool want_sum) {
  check_input(t_in, "fp8_quantize_cols");
  c10::cuda::CUDAGuard guard(t_in.device());
  const auto t = t_in.contiguous();
  const int64_t R = t.size(0), C = t.size(1);
  TORCH_CHECK(Rp >= R, "fp8_quantize_cols: padded length ", Rp, " < rows ", R);
  int* given = amax_bits_of(col_amax, t, "fp8_quantize_cols");
  auto q = at::empty({C, Rp}, t.options().dtype(at::kFloat8_e4m3fn));
  auto scale = at::empty({C}, t.options().dtype(at::kFloat));
  Tensor sum;
  if (C == 0 || Rp == 0) return {q, scale, want_sum ? at::zeros({C}, t.options()) : sum};
  // 16-byte loads of N = 4 float32 or 8 bfloat16 columns when aligned and C is a multiple of N, else one at a time.
  const bool fp32 = t.scalar_type() == at::kFloat;
  const int64_t n_vec = fp32 ? 4 : 8;
  const bool vec = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && C % n_vec == 0;
  const int64_t max_grid = (int64_t{1} << 31) - 1;
  const int64_t col_tiles = (C + kColTileCols - 1) / kColTileCols, row_tiles = (Rp + kColTileRows - 1) / kColTileRows;
  TORCH_CHECK(col_tiles <= max_grid && row_tiles <= 65535, "fp8_quantize_cols: [", R, ", ", C, "] padded to ", Rp,
              " rows exceeds the kernels' grid (at most ", 65535 * kColTileRows, " padded rows and ",
              max_grid * kColTileCols, " columns)");
  const dim3 tile_grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
  const bool q_aligned = reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0;  // at::empty's are
  const int store_bytes = q_aligned && Rp % 16 == 0 ? 16 : q_aligned && Rp % 4 == 0 ? 4 : 1;
  const auto stream = at::cuda::getCurrentCUDAStream();
  Tensor amax_bits;  // this call's own column maxima when none were given
  if (!given) amax_bits = at::zeros({C}, t.options().dtype(at::kInt));
  int* bits = given ? given : amax_bits.data_ptr<int>();
  Tensor partial;  // want_sum: [row tiles, C] float32, the tiles' column sums
  if (want_sum) partial = at::empty({row_tiles, C}, t.options().dtype(at::kFloat));
  float* pp = want_sum ? partial.data_ptr<float>() : nullptr;
  auto* qp = static_cast<fp8*>(q.data_ptr());
  auto* sp = scale.data_ptr<float>();
  VDT_DISPATCH_FLOAT_BF16(t, T, "fp8_quantize_cols", [&] {
    constexpr int N = 16 / sizeof(T);
    auto run = [&](auto kvec, auto ksum) {
      constexpr bool kVec = decltype(kvec)::value, kSum = decltype(ksum)::value;
      constexpr int n = kVec ? N : 1;
      if (!given) launch_col_amax<T, n, kVec>(t.data_ptr<T>(), bits, R, C, stream);
      quantize_cols_kernel<T, n, kVec, kSum><<<tile_grid, kColThreads, 0, stream>>>(t.data_ptr<T>(), bits, qp, sp, pp,
                                                                                    R, C, Rp, store_bytes);
      check_launch();
    };
    using yes = std::true_type;
    using no = std::false_type;
    if (vec) want_sum ? run(yes{}, yes{}) : run(yes{}, no{});
    else want_sum ? run(no{}, yes{}) : run(no{}, no{});
  });
  if (want_sum) sum = column_sum_finish(partial, t.scalar_type());
  return {q, scale, sum};
}

}  // namespace vdt::kernels::cuda
