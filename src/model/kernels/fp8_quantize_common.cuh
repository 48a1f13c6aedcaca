// Device and host helpers the FP8 quantization kernels share (fp8_linear_cuda.cu: row-wise; fp8_linear_cols_cuda.cu:
// column-wise): the E4M3 conversion as ATen's (quantize) and its fast path (e4m3x2), the scale, the input activation
// applied on the way (gelu_tanh_as), the column-maximum pass and its launch, input checks. Everything is in an unnamed
// namespace: each kernel file has its own copy. Every step gives what ATen's in fp8_linear.cpp's fallback gives, bit
// for bit, except gelu_tanh_as (within a few float32 ulps of ATen's GELU before its rounding).
#pragma once
#include "core/cuda_common.cuh"
#include "model/kernels/fp8_linear_cuda.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
using fp8 = c10::Float8_e4m3fn;
using bf16 = c10::BFloat16;
constexpr int kAmaxWarps = 8;       // warps per block of the column-maximum pass (each on its own rows)
constexpr int64_t kAmaxRows = 128;  // rows per block of the column-maximum pass (more when the grid needs it)

// max that keeps a NaN, as ATen's amax does
__device__ __forceinline__ float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

__device__ __forceinline__ float scale_of(float amax) {
  return (amax < kFp8AmaxFloor ? kFp8AmaxFloor : amax) * kFp8InvMax;  // a NaN stays NaN, as ATen's clamp_min
}

__device__ __forceinline__ fp8 quantize(float v, float scale) {
  float s = __fdiv_rn(v, scale);                              // IEEE division whatever the compile flags
  s = s > kFp8Max ? kFp8Max : (s < -kFp8Max ? -kFp8Max : s);  // a NaN passes, as ATen's clamp
  return fp8(s);
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

// GELU with the tanh approximation of a value x of type T, rounded to T as ATen's output is, computed without tanhf:
// 0.5 x (1 + tanh(u)) = x sigmoid(2u) = x / (1 + e^(-2u)), u = ATen's inner term (its constants, float32), with the
// hardware's exp2 and division (__expf, __fdividef: a few float32 ulps, no cancellation in the negative tail where
// 1 + tanh(u) is small): the three passes that apply it on Wan 5B's [8190, 14336] took 14.9 ms a step against 16.8
// with tanhf (they are latency- more than compute-bound, docs/BENCHMARKS.md). Not ATen's
// bits: its value rounds to the same T except within a few float32 ulps of a rounding edge (and in the far negative
// tail, where ATen's 1 + tanhf(u) loses its bits to cancellation and this keeps them); tests bound the difference.
// Infinities and NaN as ATen's: +inf -> +inf, -inf -> NaN, NaN -> NaN.
template <typename T>
__device__ __forceinline__ float gelu_tanh_as(float x) {
  constexpr float kBeta = M_SQRT2 * M_2_SQRTPI * 0.5f;
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * (x * x * x));
  return static_cast<float>(static_cast<T>(__fdividef(x, 1.f + __expf(-2.f * inner))));
}

// v[0..N) through the input activation when kGelu (values of type T)
template <typename T, int N, bool kGelu>
__device__ __forceinline__ void activate(float (&v)[N]) {
  if constexpr (kGelu) {
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = gelu_tanh_as<T>(v[j]);
  }
}

// Column maxima of t [R, C] into amax_bits [C] (zero-initialised). Block (32, kAmaxWarps): thread x takes the N
// consecutive columns (blockIdx.x * 32 + x) * N (a 16-byte load when kVec: a warp reads 512 contiguous bytes of a row),
// warp y every kAmaxWarps-th row of [blockIdx.y * rows, + rows); the warps' maxima meet in shared memory, then one
// atomicMax per column on the float's bits, which order like the floats for values >= 0 (a NaN, sign clear, above
// +inf). kGelu: the maxima of gelu_tanh(t) (activate).
template <typename T, int N, bool kVec, bool kGelu>
__global__ void __launch_bounds__(32 * kAmaxWarps)
    col_amax_kernel(const T* __restrict__ t, int* __restrict__ amax_bits, int64_t R, int64_t C, int64_t rows) {
  __shared__ cuda_common::Pack<float, N> part[kAmaxWarps][32];
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * N;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows, r1 = r0 + rows < R ? r0 + rows : R;
  cuda_common::Pack<float, N> m;
#pragma unroll
  for (int j = 0; j < N; ++j) m.v[j] = 0.f;
  if (c < C) {                                     // with kVec, C is a multiple of N: all N columns are in
    constexpr int kStep = kAmaxWarps, kBatch = 4;  // 4 rows' loads in flight per thread
    int64_t r = r0 + threadIdx.y;
    for (; r + (kBatch - 1) * kStep < r1; r += kBatch * kStep) {
      float v[kBatch][N];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) cuda_common::load<N, kVec>(t + (r + u * kStep) * C + c, v[u]);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) activate<T, N, kGelu>(v[u]);
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
#pragma unroll
        for (int j = 0; j < N; ++j) m.v[j] = nan_max(m.v[j], fabsf(v[u][j]));
    }
    for (; r < r1; r += kStep) {
      float v[N];
      cuda_common::load<N, kVec>(t + r * C + c, v);
      activate<T, N, kGelu>(v);
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

void check_launch() { C10_CUDA_KERNEL_LAUNCH_CHECK(); }

// Column maxima of t [R, C] (of gelu_tanh(t) when kGelu) into amax_bits [C] (zero-initialised): col_amax_kernel's
// launch.
template <typename T, int N, bool kVec, bool kGelu = false>
void launch_col_amax(const T* t, int* amax_bits, int64_t R, int64_t C, cudaStream_t stream) {
  if (R == 0 || C == 0) return;
  const int64_t rows = std::max(kAmaxRows, (R + 65534) / 65535);  // the row blocks within the grid's y limit
  const int64_t col_blocks = (C + 32 * N - 1) / (32 * N);
  TORCH_CHECK(col_blocks < (int64_t{1} << 31), "fp8 column maxima: ", C, " columns exceed the kernel's grid");
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>((R + rows - 1) / rows));
  col_amax_kernel<T, N, kVec, kGelu><<<grid, dim3(32, kAmaxWarps), 0, stream>>>(t, amax_bits, R, C, rows);
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
}  // namespace vdt::kernels::cuda
