// Column-wise kernel of fp8_linear_cuda.h, t [R, C] -> q [C, Rp] with the transpose fused (the cast+transpose a
// column-major _scaled_mm operand needs), built to run near memory bandwidth (it quantizes every weight each step):
//   1. column maxima (fp8_quantize_common.cuh's pass), unless a row-wise pass took them;
//   2. quantize + transpose by tiles of 128 rows x 64 columns of t: 16-byte loads along t's rows (4 rows x N columns a
//      thread), each column's scale and its reciprocal computed once per tile, the 4 rows' E4M3 bytes of a column
//      packed into one word of q's row in registers, an XOR-swizzled shared-memory tile (no bank conflicts on either
//      side), 16-byte stores along q's rows (4- or 1-byte ones when Rp is not a multiple of 16 or of 4); the tile's
//      column sums on the way when asked (the bias gradient).
// The input activation (gelu: the wgrad operand of Wan's ffn.2 is gelu(h)) is applied as values are loaded, in both
// passes, when loads are 16 bytes and no sums are asked (else gelu(t) is written first by ATen).
// Without 16-byte alignment or with C not a multiple of N both passes load one element at a time. Bit for bit as ATen's
// in fp8_linear.cpp's fallback, but for the GELU applied on the way (fp8_quantize_common.cuh's gelu_tanh_as). Not
// here: the row-wise kernels (fp8_linear_cuda.cu).
#include "model/kernels/bias_grad_cuda.h"
#include "model/kernels/fp8_quantize_common.cuh"
#include "model/kernels/zeroed_scratch.h"

#include <type_traits>

namespace vdt::kernels::cuda {
namespace {

constexpr int kColTileRows = 128;  // rows of t per tile of the column-wise quantize (a 128-byte span of a q row)
constexpr int kColTileCols = 64;   // columns of t per tile (rows of q)
constexpr int kColThreads = 256;   // threads per tile block

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
// kGelu: the columns of gelu_tanh(t), each value through activate as it is loaded (amax_bits must be gelu(t)'s).
template <typename T, int N, bool kVec, bool kSum, bool kGelu>
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
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColTileCols,
                r0 = static_cast<int64_t>(blockIdx.y) * kColTileRows;
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
        activate<T, N, kGelu>(v[i][j]);
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

}  // namespace

std::tuple<Tensor, Tensor, Tensor> fp8_quantize_cols(const Tensor& t_in, int64_t Rp, const Tensor& col_amax,
                                                     bool want_sum, bool gelu) {
  check_input(t_in, "fp8_quantize_cols");
  c10::cuda::CUDAGuard guard(t_in.device());
  auto t = t_in.contiguous();
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
  if (gelu && (!vec || want_sum)) {  // the activation on the way only where the Wan FFN needs it: else written first
    t = at::gelu(t, "tanh");
    return fp8_quantize_cols(t, Rp, col_amax, want_sum, false);
  }
  const int64_t max_grid = (int64_t{1} << 31) - 1;
  const int64_t col_tiles = (C + kColTileCols - 1) / kColTileCols, row_tiles = (Rp + kColTileRows - 1) / kColTileRows;
  TORCH_CHECK(col_tiles <= max_grid && row_tiles <= 65535, "fp8_quantize_cols: [", R, ", ", C, "] padded to ", Rp,
              " rows exceeds the kernels' grid (at most ", 65535 * kColTileRows, " padded rows and ",
              max_grid * kColTileCols, " columns)");
  const dim3 tile_grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
  const bool q_aligned = reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0;  // at::empty's are
  const int store_bytes = q_aligned && Rp % 16 == 0 ? 16 : q_aligned && Rp % 4 == 0 ? 4 : 1;
  const auto stream = at::cuda::getCurrentCUDAStream();
  Tensor amax_bits;                                              // this call's own column maxima when none were given
  if (!given) amax_bits = zeroed_scratch().take(C, t.device());  // [C] int32 zeros (no fill launch of its own)
  int* bits = given ? given : amax_bits.data_ptr<int>();
  Tensor partial;  // want_sum: [row tiles, C] float32, the tiles' column sums
  if (want_sum) partial = at::empty({row_tiles, C}, t.options().dtype(at::kFloat));
  float* pp = want_sum ? partial.data_ptr<float>() : nullptr;
  auto* qp = static_cast<fp8*>(q.data_ptr());
  auto* sp = scale.data_ptr<float>();
  VDT_DISPATCH_FLOAT_BF16(t, T, "fp8_quantize_cols", [&] {
    constexpr int N = 16 / sizeof(T);
    auto run = [&](auto kvec, auto ksum, auto kgelu) {
      constexpr bool kVec = decltype(kvec)::value, kSum = decltype(ksum)::value, kGelu = decltype(kgelu)::value;
      constexpr int n = kVec ? N : 1;
      if (!given) launch_col_amax<T, n, kVec, kGelu>(t.data_ptr<T>(), bits, R, C, stream);
      quantize_cols_kernel<T, n, kVec, kSum, kGelu>
          <<<tile_grid, kColThreads, 0, stream>>>(t.data_ptr<T>(), bits, qp, sp, pp, R, C, Rp, store_bytes);
      check_launch();
    };
    using yes = std::true_type;
    using no = std::false_type;
    if (gelu)
      run(yes{}, no{}, yes{});  // vec and no sums (above)
    else if (vec)
      want_sum ? run(yes{}, yes{}, no{}) : run(yes{}, no{}, no{});
    else
      want_sum ? run(no{}, yes{}, no{}) : run(no{}, no{}, no{});
  });
  if (want_sum) sum = column_sum_finish(partial, t.scalar_type());
  return {q, scale, sum};
}

}  // namespace vdt::kernels::cuda
