// Host launcher of vdt's AdamW kernel (adamw_cuda.cu), called by optimizer.cpp only when VDT_WITH_CUDA_KERNELS is
// defined. One launch updates a whole bucket of parameters (one device, one dtype pair): the same update as
// at::_fused_adamw_ (float32 math, decoupled weight decay, bias correction from each parameter's float32 step tensor,
// the update skipped on the device when found_inf is non-zero), with the gradients multiplied by `grad_scale` (the clip
// coefficient) as they are read and never written back: a pass of 2 bytes per bfloat16 parameter fewer than the ATen
// kernel with its grad_scale, which stores the unscaled gradients.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace vdt::optim_cuda {

struct AdamWHyper {
  double lr, beta1, beta2, weight_decay, eps;
};

// Whether the kernel takes this parameter: on a CUDA device the kernel has an image for, contiguous parameter,
// gradient and moments, parameter float32 or bfloat16 with a gradient of the same dtype, moments float32 or bfloat16.
bool adamw_takes(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg);

// params, grads, exp_avgs, exp_avg_sqs, steps: one entry per parameter, all taken by adamw_takes with one dtype pair;
// steps are 0-dim float32 (already counting this step). found_inf, grad_scale: 0-dim float32 on the device or
// undefined.
void adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                const std::vector<at::Tensor>& steps, const AdamWHyper& h, const at::Tensor& found_inf,
                const at::Tensor& grad_scale);

}  // namespace vdt::optim_cuda
