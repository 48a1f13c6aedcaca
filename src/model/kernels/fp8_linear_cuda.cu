// Row-wise kernels of fp8_linear_cuda.h: the amax + quantize of an operand's rows, and its column maxima on the way.
// Rows of up to 16 x 32 loads of 16 bytes (4096 bfloat16) one warp each, the row held in registers (amax by warp
// shuffles, one read); wider or unaligned rows one thread block each (amax by a warp-shuffle + shared-memory block
// reduction, the row read twice, as many threads as make every thread's share of loads equal: row_threads); the rows
// of gelu_tanh(t) (the input activation applied on the way: Wan's ffn.2) one block each with the row held in registers
// (quantize_rows_held_kernel). Without 16-byte alignment or with C not a multiple of N the block kernel loads one
// element at a time. Every step gives what ATen's in fp8_linear.cpp's fallback gives, bit for bit: IEEE division
// (__fdiv_rn, or the column-wise kernel's fast path, recip_of), NaN-propagating max and clamp, c10's round-to-nearest-
// even E4M3 conversion (or the hardware's saturating one, which agrees with it on every non-NaN); the GELU applied on
// the way is the one exception (within a few float32 ulps of ATen's: fp8_quantize_common.cuh's gelu_tanh_as). Not
// here: the column-wise kernel (fp8_linear_cols_cuda.cu).
// Built for TORCH_CUDA_ARCH_LIST / VDT_CUDA_ARCHITECTURES (default 90a: H100/H200).
#include "model/kernels/fp8_quantize_common.cuh"

#include <cuda_bf16.h>

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

namespace vdt::kernels::cuda {
namespace {

constexpr int kRowThreads = 512;  // most threads per block of the row-wise kernel (a multiple of 32)
constexpr int kWarpRows = 8;      // rows (warps) per block of the warp-per-row kernel
constexpr int kHeldRounds = 4;    // most loads a thread of the held-row kernel (bfloat16 rows up to 16384)

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

// v[0..N) by its row's scale s as E4M3 bytes: two a conversion (e4m3x2, y = recip_of(s)) when fast (a finite scale, N
// even), else quantize() value by value (a row with a NaN or inf)
template <int N>
__device__ __forceinline__ cuda_common::Pack<fp8, N> quantize_pack(const float (&v)[N], float s, float y, bool fast) {
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
  return pk;
}

// The same from a held pack of T (the row kept as loaded: T's values converted pair by pair, never gathered into a
// float array: through quantize_pack above, ptxas took more registers and, at 12 loads a lane, spilled)
template <typename T, int N>
__device__ __forceinline__ cuda_common::Pack<fp8, N> quantize_held_pack(const cuda_common::Pack<T, N>& p, float s,
                                                                        float y, bool fast) {
  cuda_common::Pack<fp8, N> pk;
  if (fast) {
#pragma unroll
    for (int j = 0; j + 1 < N; j += 2) {
      const uint32_t two = e4m3x2(static_cast<float>(p.v[j]), static_cast<float>(p.v[j + 1]), s, y);
      pk.v[j].x = static_cast<uint8_t>(two & 0xffu);
      pk.v[j + 1].x = static_cast<uint8_t>(two >> 8);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) pk.v[j] = quantize(static_cast<float>(p.v[j]), s);
  }
  return pk;
}

// |v[0..N)| max-ed into this thread's shared-memory slots of round k ([round][element][thread]: a thread owns the same
// columns in every row), as float bits (non-negative floats order as their int bits)
template <int N>
__device__ __forceinline__ void slot_maxima(int* slots, int64_t k, const float (&v)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    int& m = slots[(k * N + j) * blockDim.x + threadIdx.x];
    m = max(m, __float_as_int(fabsf(v[j])));
  }
}

// The end of a block's column maxima kept in shared-memory slots [round][element][thread] (a thread's N consecutive
// columns of each round of per_round columns): after the block's last row, one atomicMax a column into amax_bits
// (columns whose maximum is 0 skipped: the buffer starts at 0).
template <int N>
__device__ __forceinline__ void flush_slot_maxima(const int* slots, int* amax_bits, int64_t C, int64_t per_round) {
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {  // column c: round c / per_round, thread (c % per_round) / N
    const int64_t k = c / per_round, in_round = c % per_round;
    const int m = slots[(k * N + in_round % N) * blockDim.x + in_round / N];
    if (m != 0) atomicMax(amax_bits + c, m);
  }
}

// One block per row r of t [R, C] (a block takes every gridDim.x-th row); each thread takes N consecutive columns at a
// time (16-byte loads and 8-byte fp8 stores when kVec: C a multiple of N and the row pointers aligned), the row read
// twice (amax, then quantize; the second read mostly from L1). With kVec and a finite scale the quotients go through
// the column kernel's conversion (the row's reciprocal once, two values per saturating cvt: e4m3x2, the same bytes as
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
      if constexpr (kColMax) slot_maxima<N>(col_amax_slots, k, v);
    }
    const float s = scale_of(block_max(amax));
    if (threadIdx.x == 0) scale[r] = s;
    fp8* out = q + r * C;
    const bool fast = kVec && N % 2 == 0 && isfinite(s);  // the same for the whole block
    const float y = fast ? recip_of(s) : 0.f;
    for (int64_t c = threadIdx.x * N; c < C; c += per_round) {
      float v[N];
      cuda_common::load<N, kVec>(row + c, v);
      const auto pk = quantize_pack(v, s, y, fast);
      if constexpr (kVec) {
        *reinterpret_cast<cuda_common::Pack<fp8, N>*>(out + c) = pk;
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) out[c + j] = pk.v[j];
      }
    }
  }
  if constexpr (kColMax) flush_slot_maxima<N>(col_amax_slots, amax_bits, C, per_round);
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
  // kColMax: the block's column maxima (float bits) as [load i][element j][lane] (V x N x 32 slots): a warp's atomics
  // on one (i, j) hit 32 consecutive words, no bank conflict (by column they would be N words apart: N-way)
  extern __shared__ int col_amax_slots[];
  const int lane = threadIdx.x % 32;
  __nv_bfloat162 cmax[kColMax ? V : 1][N / 2];
  if constexpr (kColMax) {
    for (int i = threadIdx.x; i < V * N * 32; i += blockDim.x) col_amax_slots[i] = 0;
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
      *reinterpret_cast<cuda_common::Pack<fp8, N>*>(out + c) = quantize_held_pack(raw[i], s, y, fast);
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
        atomicMax(col_amax_slots + (i * N + 2 * k) * 32 + lane, __float_as_int(m.x));
        atomicMax(col_amax_slots + (i * N + 2 * k + 1) * 32 + lane, __float_as_int(m.y));
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {  // column c = (i * 32 + lane) * N + j
      const int64_t i = c / (32 * N), l = c / N % 32, j = c % N;
      const int m = col_amax_slots[(i * N + j) * 32 + l];
      if (m != 0) atomicMax(amax_bits + c, m);
    }
  }
}

// A block per row of t [R, C] at a time, looping over the rows with as many blocks as are resident (a block takes every
// gridDim.x-th row), for rows in aligned 16-byte loads (C a multiple of N) of at most kRounds loads a thread: the row's
// loads held in registers between the amax and the quantize (one read of the row, as the warp-per-row kernel, for
// rows too wide for a warp), and the next row's loads issued before this row's arithmetic, its block reduction and its
// stores (one row per block in sequence left the loads' latency exposed: 0.22 ms for Wan 5B's [8190, 14336] GELU pass,
// ~1.6 TB/s). kGelu: the rows of gelu_tanh(t), each value through activate as it is unpacked (gelu(t),
// Wan's ffn.2 input, is never written; evaluated once a value). At most 64 registers a thread, so that two blocks of
// up to kRowThreads fit an SM (unbounded, ptxas took 80 for bfloat16: one block an SM). Values as quantize_rows_kernel.
// kColMax: the maxima of the values quantized (of gelu(t) with kGelu) over each column, into amax_bits [C]
// (zero-initialised), as quantize_rows_kernel takes them: a thread owns the same columns in every row and keeps their
// maxima's float bits in its own shared-memory slots ([round][element][thread]); after the last row, one atomicMax a
// column.
template <typename T, int N, int kRounds, bool kGelu, bool kColMax>
__global__ void __launch_bounds__(kRowThreads, 2)
    quantize_rows_held_kernel(const T* __restrict__ t, fp8* __restrict__ q, float* __restrict__ scale,
                              int* __restrict__ amax_bits, int64_t R, int64_t C) {
  static_assert(N % 2 == 0, "two values per conversion");
  extern __shared__ int col_amax_slots[];  // kColMax: kRounds x N x blockDim.x
  const int64_t per_round = static_cast<int64_t>(blockDim.x) * N;
  if constexpr (kColMax) {
    for (int i = threadIdx.x; i < kRounds * N * static_cast<int>(blockDim.x); i += blockDim.x) col_amax_slots[i] = 0;
  }
  // this row's values (activated in place: gelu_tanh_as rounds to T, so T holds them exactly) and the next row's loads
  cuda_common::Pack<T, N> cur[kRounds], next[kRounds];
  auto fetch = [&](cuda_common::Pack<T, N>(&into)[kRounds], int64_t r) {
#pragma unroll
    for (int k = 0; k < kRounds; ++k) {
      const int64_t c = threadIdx.x * N + k * per_round;
      if (c < C) into[k] = *reinterpret_cast<const cuda_common::Pack<T, N>*>(t + r * C + c);
    }
  };
  if (blockIdx.x < R) fetch(cur, blockIdx.x);
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    if (r + gridDim.x < R) fetch(next, r + gridDim.x);  // in flight through this row's work
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < kRounds; ++k) {
      if (threadIdx.x * N + k * per_round >= C) continue;
      float v[N];
#pragma unroll
      for (int j = 0; j < N; ++j) v[j] = static_cast<float>(cur[k].v[j]);
      if constexpr (kGelu) {
        activate<T, N, kGelu>(v);
#pragma unroll
        for (int j = 0; j < N; ++j) cur[k].v[j] = static_cast<T>(v[j]);
      }
#pragma unroll
      for (int j = 0; j < N; ++j) amax = nan_max(amax, fabsf(v[j]));
      if constexpr (kColMax) slot_maxima<N>(col_amax_slots, k, v);
    }
    const float s = scale_of(block_max(amax));
    if (threadIdx.x == 0) scale[r] = s;
    const bool fast = isfinite(s);  // the same for the whole block
    const float y = fast ? recip_of(s) : 0.f;
    fp8* out = q + r * C;
#pragma unroll
    for (int k = 0; k < kRounds; ++k) {
      const int64_t c = threadIdx.x * N + k * per_round;
      if (c >= C) continue;
      *reinterpret_cast<cuda_common::Pack<fp8, N>*>(out + c) = quantize_held_pack(cur[k], s, y, fast);
    }
#pragma unroll
    for (int k = 0; k < kRounds; ++k) cur[k] = next[k];
  }
  if constexpr (kColMax) flush_slot_maxima<N>(col_amax_slots, amax_bits, C, per_round);
}

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
// at once (the column maxima's atomics then come once per resident block, not per row). The occupancy is asked once per
// kernel, device, block size and shared-memory size (these launches come per linear per step), and a kernel is opted
// in to more than 48 KiB of dynamic shared memory once per size it has not been allowed yet.
unsigned resident_grid(const void* kernel, int threads, size_t smem, int64_t units) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, size_t>, int> per_sm;  // (kernel, device, threads, smem)
  static std::map<std::pair<const void*, int>, size_t> allowed;            // (kernel, device) -> opted-in bytes
  const int device = c10::cuda::current_device();
  int blocks = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto [it, fresh] = per_sm.try_emplace({kernel, device, threads, smem}, 0);
    if (fresh) {
      // the kernel's static shared memory (block_max's partials) counts toward the 48 KiB default too: 48 KiB of
      // slots without the opt-in failed to launch (`invalid argument`, a 384-thread held row)
      cudaFuncAttributes attrs{};
      C10_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
      auto& bytes = allowed[{kernel, device}];
      if (smem + attrs.sharedSizeBytes > 48 * 1024 && smem > bytes) {
        C10_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        bytes = smem;
      }
      C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, threads, smem));
    }
    blocks = std::max(it->second, 1);
  }
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(units, int64_t{blocks} * sms)));
}

// The warp-per-row kernel with the fewest loads a lane (4, 8, 12 or 16) that covers a row of C columns in loads of N;
// kColMax: looping over the rows with as many blocks as are resident, the block's column maxima in shared memory.
template <typename T, int N, bool kColMax, int V>
void launch_rows_warp_v(cudaStream_t stream, const T* t, fp8* q, float* scale, int* amax_bits, int64_t R, int64_t C) {
  auto* kernel = quantize_rows_warp_kernel<T, N, V, kColMax>;
  const int threads = 32 * kWarpRows;
  const size_t smem = kColMax ? V * N * 32 * sizeof(int) : 0;
  const int64_t blocks = (R + kWarpRows - 1) / kWarpRows;
  const unsigned grid = kColMax ? resident_grid(reinterpret_cast<const void*>(kernel), threads, smem, blocks)
                                : static_cast<unsigned>(blocks);
  kernel<<<grid, threads, smem, stream>>>(t, q, scale, amax_bits, R, C);
  check_launch();
}

template <typename T, int N, bool kColMax>
void launch_rows_warp(cudaStream_t stream, const T* t, fp8* q, float* scale, int* amax_bits, int64_t R, int64_t C) {
  const int64_t per_lane = (C + 32 * N - 1) / (32 * N);
  if (per_lane <= 4)
    launch_rows_warp_v<T, N, kColMax, 4>(stream, t, q, scale, amax_bits, R, C);
  else if (per_lane <= 8)
    launch_rows_warp_v<T, N, kColMax, 8>(stream, t, q, scale, amax_bits, R, C);
  else if (per_lane <= 12)
    launch_rows_warp_v<T, N, kColMax, 12>(stream, t, q, scale, amax_bits, R, C);
  else
    launch_rows_warp_v<T, N, kColMax, 16>(stream, t, q, scale, amax_bits, R, C);
}

// The block-per-row kernel; kColMax: looping over the rows with as many blocks as are resident, each thread's column
// maxima in shared memory (a rounds x N x threads slot array; smem 0 without).
template <typename T, int N, bool kVec, bool kColMax>
void launch_rows_block(cudaStream_t stream, const T* t, fp8* q, float* scale, int* amax_bits, int64_t R, int64_t C,
                       size_t smem) {
  auto* kernel = quantize_rows_kernel<T, N, kVec, kColMax>;
  const int threads = row_threads(C, N);
  const unsigned grid =
      kColMax ? resident_grid(reinterpret_cast<const void*>(kernel), threads, smem, R) : static_cast<unsigned>(R);
  kernel<<<grid, threads, smem, stream>>>(t, q, scale, amax_bits, R, C);
  check_launch();
}

}  // namespace

bool fp8_device_supported(int device_index) {
  return cuda_common::image_fits(device_index, quantize_rows_kernel<float, 1, false, false>);
}

std::tuple<Tensor, Tensor> fp8_quantize_rows(const Tensor& t_in, const Tensor& col_amax, bool gelu) {
  check_input(t_in, "fp8_quantize_rows");
  c10::cuda::CUDAGuard guard(t_in.device());
  auto t = t_in.contiguous();
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
  if (gelu) {  // the activation on the way: rows of up to kHeldRounds loads a thread (else written first); column
    // maxima for bfloat16 in the same pass
    if (!vec || (bits && !bf) || (C / n + threads - 1) / threads > kHeldRounds) {
      t = at::gelu(t, "tanh");
      return fp8_quantize_rows(t, col_amax, false);
    }
    const auto block = static_cast<int>(threads);
    auto launch = [&](auto* kernel, auto* data, size_t smem) {
      const unsigned grid = resident_grid(reinterpret_cast<const void*>(kernel), block, smem, R);
      kernel<<<grid, block, smem, stream>>>(data, qp, sp, bits, R, C);
    };
    const size_t held_smem = static_cast<size_t>(kHeldRounds) * n * threads * sizeof(int);
    if (bits)
      launch(quantize_rows_held_kernel<bf16, 8, kHeldRounds, true, true>, t.data_ptr<bf16>(), held_smem);
    else if (bf)
      launch(quantize_rows_held_kernel<bf16, 8, kHeldRounds, true, false>, t.data_ptr<bf16>(), 0);
    else
      launch(quantize_rows_held_kernel<float, 4, kHeldRounds, true, false>, t.data_ptr<float>(), 0);
    check_launch();
    return {q, scale};
  }
  if (warp) {
    if (!bf)
      launch_rows_warp<float, 4, false>(stream, t.data_ptr<float>(), qp, sp, nullptr, R, C);
    else if (fuse)
      launch_rows_warp<bf16, 8, true>(stream, t.data_ptr<bf16>(), qp, sp, bits, R, C);
    else
      launch_rows_warp<bf16, 8, false>(stream, t.data_ptr<bf16>(), qp, sp, nullptr, R, C);
  } else if (!bf) {
    if (vec)
      launch_rows_block<float, 4, true, false>(stream, t.data_ptr<float>(), qp, sp, nullptr, R, C, 0);
    else
      launch_rows_block<float, 1, false, false>(stream, t.data_ptr<float>(), qp, sp, nullptr, R, C, 0);
  } else if (fuse) {
    if (vec)
      launch_rows_block<bf16, 8, true, true>(stream, t.data_ptr<bf16>(), qp, sp, bits, R, C, block_smem);
    else
      launch_rows_block<bf16, 1, false, true>(stream, t.data_ptr<bf16>(), qp, sp, bits, R, C, block_smem);
  } else {
    if (vec)
      launch_rows_block<bf16, 8, true, false>(stream, t.data_ptr<bf16>(), qp, sp, nullptr, R, C, 0);
    else
      launch_rows_block<bf16, 1, false, false>(stream, t.data_ptr<bf16>(), qp, sp, nullptr, R, C, 0);
  }
  if (bits && !fuse) {
    const bool aligned = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && C % n_vec == 0;
    if (!bf) {
      if (aligned)
        launch_col_amax<float, 4, true>(t.data_ptr<float>(), bits, R, C, stream);
      else
        launch_col_amax<float, 1, false>(t.data_ptr<float>(), bits, R, C, stream);
    } else {
      if (aligned)
        launch_col_amax<bf16, 8, true>(t.data_ptr<bf16>(), bits, R, C, stream);
      else
        launch_col_amax<bf16, 1, false>(t.data_ptr<bf16>(), bits, R, C, stream);
    }
  }
  return {q, scale};
}

}  // namespace vdt::kernels::cuda
