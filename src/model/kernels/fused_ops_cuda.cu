// CUDA kernels of fused_ops.h, the forwards (fused_ops_cuda.h): Wan's LayerNorm + modulate and gate + residual, H3's
// modulate and gate + residual. Correctness first: one thread block per token row (LayerNorm statistics by a
// warp-shuffle + shared-memory block reduction in fp32, two passes: mean, then centred variance), 16-byte vector loads
// when the width and the pointers allow. Every intermediate is rounded to the dtype the reference op would have
// produced (`rnd<T>`), so the forward matches reference_ops.cpp. The backwards: fused_ops_backward_cuda.cu.
// Built for TORCH_CUDA_ARCH_LIST / VDT_CUDA_ARCHITECTURES (default 90a: H100/H200).
#include "model/kernels/fused_ops_cuda.h"
#include "model/kernels/fused_ops_cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace vdt::kernels::cuda {
namespace {

// Wan: h = LN(x) in X, out = shift + h * (1 + scale) in float32, then X. One block per token row.
template <typename X, int N>
__global__ void norm_modulate_kernel(const X* __restrict__ x, const float* __restrict__ shift,
                                     const float* __restrict__ scale, X* __restrict__ out, float* __restrict__ mean_out,
                                     float* __restrict__ rstd_out, int64_t D, GroupRows map, float eps) {
  const int64_t row = blockIdx.x;
  const X* xr = x + row * D;
  float s = 0.f;
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N];
    load<N>(xr + i, v);
#pragma unroll
    for (int k = 0; k < N; ++k) s += v[k];
  }
  const float mean = block_sum(s) / static_cast<float>(D);
  float q = 0.f;
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N];
    load<N>(xr + i, v);
#pragma unroll
    for (int k = 0; k < N; ++k) q += (v[k] - mean) * (v[k] - mean);
  }
  const float rstd = rsqrtf(block_sum(q) / static_cast<float>(D) + eps);
  const int64_t m = map(row);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float v[N], sh[N], sc[N], o[N];
    load<N>(xr + i, v);
    load<N>(shift + m * D + i, sh);
    load<N>(scale + m * D + i, sc);
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = sh[k] + rnd<X>((v[k] - mean) * rstd) * (1.f + sc[k]);
    store<N>(out + row * D + i, o);
  }
  if (threadIdx.x == 0) mean_out[row] = mean, rstd_out[row] = rstd;
}

// Gate + residual: out = x + gate[m] * y. Wan rounds the product to X (its `.to(x's dtype)`); H3 rounds it to the
// promoted dtype (X when the gate is X, else float32: no rounding). One block per token row.
template <typename X, typename M, bool kRoundProduct, int N, class Map>
__global__ void gate_kernel(const X* __restrict__ x, const M* __restrict__ gate, const X* __restrict__ y,
                            X* __restrict__ out, int64_t D, Map map) {
  const int64_t row = blockIdx.x, m = map(row);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float xv[N], gv[N], yv[N], o[N];
    load<N>(x + row * D + i, xv);
    load<N>(gate + m * D + i, gv);
    load<N>(y + row * D + i, yv);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float p = gv[k] * yv[k];
      if constexpr (kRoundProduct) p = rnd<X>(p);
      o[k] = xv[k] + p;
    }
    store<N>(out + row * D + i, o);
  }
}

// H3 modulate: s1 = 1 + scale rounded to M; out = x * s1 + shift, each step rounded to X when M is X (the reference's
// bf16 ops), in float32 otherwise. One block per token row.
template <typename X, typename M, int N>
__global__ void modulate_kernel(const X* __restrict__ x, const M* __restrict__ shift, const M* __restrict__ scale,
                                X* __restrict__ out, int64_t D, IndexRows map) {
  constexpr bool kSame = std::is_same_v<X, M>;
  const int64_t row = blockIdx.x, m = map(row);
  for (int64_t i = threadIdx.x * N; i < D; i += blockDim.x * N) {
    float xv[N], sh[N], sc[N], o[N];
    load<N>(x + row * D + i, xv);
    load<N>(shift + m * D + i, sh);
    load<N>(scale + m * D + i, sc);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float p = xv[k] * rnd<M>(1.f + sc[k]);
      if constexpr (kSame) p = rnd<X>(p);
      o[k] = p + sh[k];
    }
    store<N>(out + row * D + i, o);
  }
}

}  // namespace

bool device_supported(int device_index) {
  return cuda_common::image_fits(device_index, norm_modulate_kernel<float, 1>);
}

std::tuple<Tensor, Tensor, Tensor> modulated_norm_forward(const Tensor& x_in, const Tensor& shift_in,
                                                          const Tensor& scale_in, double eps) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous();
  const auto shift = shift_in.to(at::kFloat).contiguous(), scale = scale_in.to(at::kFloat).contiguous();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = shift.size(1);
  auto out = at::empty_like(x);
  auto mean = at::empty({B * L}, x.options().dtype(at::kFloat)), rstd = at::empty_like(mean);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(x, "modulated_norm", [&] {
    const int n = vec_width<X>(D, {x.data_ptr(), out.data_ptr(), shift.data_ptr(), scale.data_ptr()},
                               {sizeof(X), sizeof(X), sizeof(float), sizeof(float)});
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(B * L), kRowThreads, 0, stream>>>(
          x.data_ptr<X>(), shift.data_ptr<float>(), scale.data_ptr<float>(), out.data_ptr<X>(), mean.data_ptr<float>(),
          rstd.data_ptr<float>(), D, group_rows(x, G), static_cast<float>(eps));
    };
    if (n > 1)
      launch(norm_modulate_kernel<X, 16 / sizeof(X)>);
    else
      launch(norm_modulate_kernel<X, 1>);
  });
  check_launch();
  return {out, mean, rstd};
}

Tensor gated_add_forward(const Tensor& x_in, const Tensor& y_in, const Tensor& gate_in) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), y = y_in.contiguous(), gate = gate_in.to(at::kFloat).contiguous();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), G = gate.size(1);
  auto out = at::empty_like(x);
  const auto stream = at::cuda::getCurrentCUDAStream();
  VDT_DISPATCH_X(x, "gated_add", [&] {
    const int n = vec_width<X>(D, {x.data_ptr(), y.data_ptr(), out.data_ptr(), gate.data_ptr()},
                               {sizeof(X), sizeof(X), sizeof(X), sizeof(float)});
    auto launch = [&](auto kernel) {
      kernel<<<row_blocks(B * L), kRowThreads, 0, stream>>>(x.data_ptr<X>(), gate.data_ptr<float>(), y.data_ptr<X>(),
                                                            out.data_ptr<X>(), D, group_rows(x, G));
    };
    if (n > 1)
      launch(gate_kernel<X, float, true, 16 / sizeof(X), GroupRows>);
    else
      launch(gate_kernel<X, float, true, 1, GroupRows>);
  });
  check_launch();
  return out;
}

Tensor h3_modulate_forward(const Tensor& x_in, const Tensor& shift_in, const Tensor& scale_in, const Tensor& rows) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), shift = shift_in.contiguous(), scale = scale_in.contiguous(), r = rows.contiguous();
  const int64_t S = x.size(0), D = x.size(1);
  auto out = at::empty_like(x);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const IndexRows map{r.data_ptr<int64_t>(), shift.size(0)};
  VDT_DISPATCH_X(x, "h3_modulate", [&] {
    dispatch_mod<X>(shift, "h3_modulate", [&](auto m) {
      using M = decltype(m);
      const int n = vec_width<X>(D, {x.data_ptr(), out.data_ptr(), shift.data_ptr(), scale.data_ptr()},
                                 {sizeof(X), sizeof(X), sizeof(M), sizeof(M)});
      auto launch = [&](auto kernel) {
        kernel<<<row_blocks(S), kRowThreads, 0, stream>>>(x.data_ptr<X>(), shift.data_ptr<M>(), scale.data_ptr<M>(),
                                                          out.data_ptr<X>(), D, map);
      };
      if (n > 1)
        launch(modulate_kernel<X, M, 16 / sizeof(X)>);
      else
        launch(modulate_kernel<X, M, 1>);
    });
  });
  check_launch();
  return out;
}

Tensor h3_gate_forward(const Tensor& x_in, const Tensor& gate_in, const Tensor& y_in, const Tensor& rows) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous(), gate = gate_in.contiguous(), y = y_in.contiguous(), r = rows.contiguous();
  const int64_t S = x.size(0), D = x.size(1);
  auto out = at::empty_like(x);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const IndexRows map{r.data_ptr<int64_t>(), gate.size(0)};
  VDT_DISPATCH_X(x, "h3_gate", [&] {
    dispatch_mod<X>(gate, "h3_gate", [&](auto m) {
      using M = decltype(m);
      constexpr bool kRound = std::is_same_v<X, M>;  // the product is rounded to the promoted dtype
      const int n = vec_width<X>(D, {x.data_ptr(), y.data_ptr(), out.data_ptr(), gate.data_ptr()},
                                 {sizeof(X), sizeof(X), sizeof(X), sizeof(M)});
      auto launch = [&](auto kernel) {
        kernel<<<row_blocks(S), kRowThreads, 0, stream>>>(x.data_ptr<X>(), gate.data_ptr<M>(), y.data_ptr<X>(),
                                                          out.data_ptr<X>(), D, map);
      };
      if (n > 1)
        launch(gate_kernel<X, M, kRound, 16 / sizeof(X), IndexRows>);
      else
        launch(gate_kernel<X, M, kRound, 1, IndexRows>);
    });
  });
  check_launch();
  return out;
}

}  // namespace vdt::kernels::cuda
