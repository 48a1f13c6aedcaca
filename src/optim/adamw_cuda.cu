// vdt's AdamW kernel (adamw_cuda.h). The parameters of a bucket are cut into chunks of kChunk elements; a table on the
// device lists each parameter's pointers, length, first chunk and whether its arrays allow 16-byte access, and a
// grid-stride loop of blocks walks the chunks in order (a block finds its parameter by stepping forward through the
// table's first-chunk column, so no per-chunk search). Each thread updates N consecutive elements at a time: one
// 16-byte load of the parameter and the gradient (8 bfloat16 or 4 float32), N-element loads of the moments, the
// update in float32, stores of the parameter and moments only. The gradient is read-only: the clip coefficient
// multiplies it in registers. Built for VDT_CUDA_ARCHITECTURES (default 90a: H100/H200).
#include "optim/adamw_cuda.h"
#include "core/cuda_common.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace vdt::optim_cuda {
namespace {

using at::Tensor;
using bf16 = c10::BFloat16;

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;  // elements per chunk: a multiple of every N
constexpr int kBlocksPerSm = 8;
// The table's columns, one row per parameter.
enum Field { kParam, kGrad, kExpAvg, kExpAvgSq, kStep, kNumel, kVector, kFields };

struct Scalars {
  float lr, lr_wd, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  double beta1_d, beta2_d;
};

template <typename P, typename S, int N, bool kVec>
__device__ __forceinline__ void update(P* p, const P* g, S* m, S* v, float gs, float step_size, float bc2_sqrt,
                                       const Scalars& c) {
  float pp[N], gg[N], mm[N], vv[N];
  cuda_common::load<N, kVec>(p, pp);
  cuda_common::load<N, kVec>(g, gg);
  cuda_common::load<N, kVec>(m, mm);
  cuda_common::load<N, kVec>(v, vv);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float grad = gg[j] * gs;
    pp[j] -= c.lr_wd * pp[j];
    mm[j] = c.beta1 * mm[j] + c.one_minus_beta1 * grad;
    vv[j] = c.beta2 * vv[j] + c.one_minus_beta2 * grad * grad;
    const float denom = sqrtf(vv[j]) / bc2_sqrt + c.eps;
    pp[j] -= step_size * mm[j] / denom;
  }
  cuda_common::store<N, kVec>(p, pp);
  cuda_common::store<N, kVec>(m, mm);
  cuda_common::store<N, kVec>(v, vv);
}

// table [T, kFields], first_chunk [T + 1] (first_chunk[T] = the bucket's chunk count).
template <typename P, typename S, int N>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const int64_t* __restrict__ table, const int64_t* __restrict__ first_chunk, int64_t T, Scalars c,
                 const float* __restrict__ found_inf, const float* __restrict__ grad_scale) {
  if (found_inf != nullptr && *found_inf != 0.f) return;
  const float gs = grad_scale != nullptr ? *grad_scale : 1.f;
  const int64_t chunks = first_chunk[T];
  int64_t t = 0;
  for (int64_t b = blockIdx.x; b < chunks; b += gridDim.x) {
    while (first_chunk[t + 1] <= b) ++t;
    const int64_t* e = table + t * kFields;
    auto* p = reinterpret_cast<P*>(e[kParam]);
    const auto* g = reinterpret_cast<const P*>(e[kGrad]);
    auto* m = reinterpret_cast<S*>(e[kExpAvg]);
    auto* v = reinterpret_cast<S*>(e[kExpAvgSq]);
    const double step = *reinterpret_cast<const float*>(e[kStep]);
    const float step_size = c.lr / static_cast<float>(1.0 - pow(c.beta1_d, step));
    const float bc2_sqrt = sqrtf(static_cast<float>(1.0 - pow(c.beta2_d, step)));
    const int64_t begin = (b - first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < e[kNumel] ? begin + kChunk : e[kNumel];
    if (e[kVector] != 0) {  // end - begin is a multiple of N
      for (int64_t i = begin + threadIdx.x * N; i < end; i += kThreads * N)
        update<P, S, N, true>(p + i, g + i, m + i, v + i, gs, step_size, bc2_sqrt, c);
    } else {
      for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
        update<P, S, 1, false>(p + i, g + i, m + i, v + i, gs, step_size, bc2_sqrt, c);
    }
  }
}

bool aligned(const Tensor& t, int64_t bytes) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0; }

template <typename P, typename S>
void launch(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
            const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& steps, const AdamWHyper& h,
            const Tensor& found_inf, const Tensor& grad_scale) {
  constexpr int N = 16 / sizeof(P);
  const auto T = static_cast<int64_t>(params.size());
  // One pinned host buffer holds the table and the first-chunk column; the copy is ordered on the stream and the
  // caching host allocator keeps the buffer until it has run.
  auto host = at::empty({T * kFields + T + 1}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  auto* row = host.data_ptr<int64_t>();
  auto* first = row + T * kFields;
  int64_t chunks = 0;
  for (int64_t i = 0; i < T; ++i, row += kFields) {
    const auto &p = params[i], &g = grads[i], &m = exp_avgs[i], &v = exp_avg_sqs[i];
    TORCH_CHECK(g.numel() == p.numel() && m.numel() == p.numel() && v.numel() == p.numel(), "adamw_step: parameter ", i,
                " has ", p.numel(), " elements but its gradient or moments differ");
    row[kParam] = reinterpret_cast<int64_t>(p.data_ptr());
    row[kGrad] = reinterpret_cast<int64_t>(g.data_ptr());
    row[kExpAvg] = reinterpret_cast<int64_t>(m.data_ptr());
    row[kExpAvgSq] = reinterpret_cast<int64_t>(v.data_ptr());
    row[kStep] = reinterpret_cast<int64_t>(steps[i].data_ptr());
    row[kNumel] = p.numel();
    row[kVector] = p.numel() % N == 0 && aligned(p, N * sizeof(P)) && aligned(g, N * sizeof(P)) &&
                   aligned(m, N * sizeof(S)) && aligned(v, N * sizeof(S));
    first[i] = chunks;
    chunks += (p.numel() + kChunk - 1) / kChunk;
  }
  first[T] = chunks;
  if (chunks == 0) return;
  const auto device = params.front().device();
  const auto table = host.to(device, /*non_blocking=*/true);
  Scalars c{};
  c.lr = static_cast<float>(h.lr), c.lr_wd = static_cast<float>(h.lr * h.weight_decay),
  c.eps = static_cast<float>(h.eps);
  c.beta1 = static_cast<float>(h.beta1), c.one_minus_beta1 = static_cast<float>(1 - h.beta1), c.beta1_d = h.beta1;
  c.beta2 = static_cast<float>(h.beta2), c.one_minus_beta2 = static_cast<float>(1 - h.beta2), c.beta2_d = h.beta2;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(chunks, int64_t{sms} * kBlocksPerSm));
  const float* inf = found_inf.defined() ? found_inf.data_ptr<float>() : nullptr;
  const float* scale = grad_scale.defined() ? grad_scale.data_ptr<float>() : nullptr;
  const int64_t* tp = table.data_ptr<int64_t>();
  adamw_kernel<P, S, N>
      <<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(tp, tp + T * kFields, T, c, inf, scale);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool supported(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; }

}  // namespace

bool adamw_takes(const Tensor& param, const Tensor& grad, const Tensor& exp_avg) {
  return param.is_cuda() && grad.device() == param.device() && grad.scalar_type() == param.scalar_type() &&
         supported(param.scalar_type()) && supported(exp_avg.scalar_type()) && param.is_contiguous() &&
         grad.is_contiguous() && exp_avg.is_contiguous() &&
         cuda_common::image_fits(param.get_device(), adamw_kernel<float, float, 4>);
}

void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const std::vector<Tensor>& steps, const AdamWHyper& h, const Tensor& found_inf,
                const Tensor& grad_scale) {
  if (params.empty()) return;
  c10::cuda::CUDAGuard guard(params.front().device());
  for (const auto* t : {&found_inf, &grad_scale})
    TORCH_CHECK(
        !t->defined() || (t->numel() == 1 && t->scalar_type() == at::kFloat && t->device() == params.front().device()),
        "adamw_step: found_inf / grad_scale must be one float32 on the parameters' device");
  const bool p32 = params.front().scalar_type() == at::kFloat, s32 = exp_avgs.front().scalar_type() == at::kFloat;
  if (p32 && s32)
    launch<float, float>(params, grads, exp_avgs, exp_avg_sqs, steps, h, found_inf, grad_scale);
  else if (p32)
    launch<float, bf16>(params, grads, exp_avgs, exp_avg_sqs, steps, h, found_inf, grad_scale);
  else if (s32)
    launch<bf16, float>(params, grads, exp_avgs, exp_avg_sqs, steps, h, found_inf, grad_scale);
  else
    launch<bf16, bf16>(params, grads, exp_avgs, exp_avg_sqs, steps, h, found_inf, grad_scale);
}

}  // namespace vdt::optim_cuda
