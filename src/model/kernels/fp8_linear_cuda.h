// Host launchers of the FP8 quantization kernels (fp8_linear_cuda.cu: row-wise, fp8_linear_cols_cuda.cu: column-wise;
// their shared helpers in fp8_quantize_common.cuh), called by fp8_linear.cpp only when
// VDT_WITH_CUDA_KERNELS is defined; the E4M3 constants both sides share. No CUDA header here, so the C++ side compiles
// without nvcc. Inputs are contiguous float32 or bfloat16 on one CUDA device (fp8_linear.cpp checks before it calls).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace vdt::kernels {

// E4M3 (float8_e4m3fn): its largest finite value. A row's scale is max(amax, floor) * (1 / 448) in float32: a
// multiplication rounds alike in a kernel and in ATen on any device (ATen's CUDA division by a host scalar multiplies
// by a rounded reciprocal instead). The floor keeps an all-zero row's scale positive (its values quantize to 0).
constexpr float kFp8Max = 448.f;
constexpr float kFp8InvMax = 1.f / 448.f;
constexpr float kFp8AmaxFloor = 1e-12f;

namespace cuda {

// True when the FP8 kernels have an image for this device (checked once per device).
bool fp8_device_supported(int device_index);

// Row-wise: t [R, C] -> (q [R, C] float8_e4m3fn, scale [R] float32), q[r, c] = e4m3(clamp(t[r, c] / scale[r], ±448)).
// col_amax (float32 [C], zero-filled, or undefined): the maxima of |t| over each column are max-ed into it (a NaN
// propagates), in the same pass for bfloat16 t. gelu: the rows of gelu_tanh(t) in t's dtype (fp8_quantize_common.cuh's
// gelu_tanh_as: ATen's GELU within a few float32 ulps before the rounding), applied as t is loaded (gelu(t) is not
// written); col_amax then of gelu(t).
std::tuple<at::Tensor, at::Tensor> fp8_quantize_rows(const at::Tensor& t, const at::Tensor& col_amax = {},
                                                     bool gelu = false);
// Column-wise with the transpose fused: t [R, C] -> (q [C, Rp] float8_e4m3fn, scale [C] float32, sum), q[c, r] =
// e4m3(clamp(t[r, c] / scale[c], ±448)) for r < R and 0 for R <= r < Rp (Rp >= R). col_amax (float32 [C], or
// undefined): t's column maxima when a row-wise pass took them (fp8_quantize_rows), else this call takes them (one more
// read of t). want_sum: sum [C] in t's dtype, the column sums (float32 accumulation, deterministic) taken on the way;
// else undefined. gelu: the columns of gelu_tanh(t), as fp8_quantize_rows (col_amax and sum of gelu(t)).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fp8_quantize_cols(const at::Tensor& t, int64_t Rp,
                                                                 const at::Tensor& col_amax = {}, bool want_sum = false,
                                                                 bool gelu = false);

}  // namespace cuda
}  // namespace vdt::kernels
