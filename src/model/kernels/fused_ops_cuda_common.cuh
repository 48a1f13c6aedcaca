// What the fused-op kernel files share (fused_ops_cuda.cu: the forwards; fused_ops_backward_cuda.cu: the backwards):
// the token row -> modulation row maps, the launch helpers (grid size, vector width, dtype dispatch) and the block
// size of the row kernels. Internal to those two files: everything is in an unnamed namespace, one copy per file.
#pragma once
#include "core/cuda_common.cuh"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <initializer_list>

namespace vdt::kernels::cuda {
namespace {

using at::Tensor;
using bf16 = c10::BFloat16;
constexpr int kRowThreads = 256;  // threads per block of the row kernels (a multiple of 32)
constexpr int kColThreads = 256;  // columns per block of the group sums

using cuda_common::block_sum, cuda_common::load, cuda_common::rnd, cuda_common::store;

// Token row -> modulation row. Wan: x [B, L, D] against [B, G, 1, D] (groups of L/G consecutive tokens); H3: an index.
struct GroupRows {
  int64_t L, Lg, G;
  __device__ __forceinline__ int64_t operator()(int64_t i) const { return (i / L) * G + (i % L) / Lg; }
};
struct IndexRows {
  const int64_t* rows;
  int64_t R;
  __device__ __forceinline__ int64_t operator()(int64_t i) const {
    const int64_t r = rows[i];
    CUDA_KERNEL_ASSERT(r >= 0 && r < R);
    return r;
  }
};

inline int64_t row_blocks(int64_t rows) {
  TORCH_CHECK(rows < (int64_t{1} << 31), "vdt fused kernels: ", rows, " token rows exceed one grid");
  return rows;
}

// Vector width for X-typed rows of width D: 16 bytes when D and every pointer allow, else 1.
template <typename X>
inline int vec_width(int64_t D, std::initializer_list<const void*> ptrs, std::initializer_list<size_t> elem_sizes) {
  constexpr int n = 16 / sizeof(X);
  if (D % n != 0) return 1;
  auto size = elem_sizes.begin();
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % (n * *size) != 0) return 1;
    ++size;
  }
  return n;
}

inline GroupRows group_rows(const Tensor& x, int64_t G) {
  const int64_t L = x.size(1);
  return GroupRows{L, L / G, G};
}

#define VDT_DISPATCH_X(t, name, ...) VDT_DISPATCH_FLOAT_BF16(t, X, name, __VA_ARGS__)

inline void check_launch() { C10_CUDA_KERNEL_LAUNCH_CHECK(); }

// Runs f.template operator()<M>() with M = float or X, matching mod's dtype.
template <typename X, class F>
inline void dispatch_mod(const Tensor& mod, const char* name, F&& f) {
  if (mod.scalar_type() == at::kFloat) return f(float{});
  TORCH_CHECK(mod.scalar_type() == c10::CppTypeToScalarType<X>::value, name, ": modulation ", mod.scalar_type(),
              " must be float32 or the activations' dtype");
  f(X{});
}

}  // namespace
}  // namespace vdt::kernels::cuda
