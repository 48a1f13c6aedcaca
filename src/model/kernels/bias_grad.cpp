// The bias gradient (bias_grad.h): dispatch between the CUDA kernel and ATen's sum.
#include "model/kernels/bias_grad.h"

#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#ifdef VDT_WITH_CUDA_KERNELS
#include "model/kernels/bias_grad_cuda.h"
#endif

namespace vdt::kernels {

torch::Tensor bias_grad(const torch::Tensor& g, bool aten) {
  TORCH_CHECK(g.dim() == 2, "bias_grad: expected g [N, C], got ", g.sizes());
#ifdef VDT_WITH_CUDA_KERNELS
  if (!aten && cuda_kernels_take(g)) return cuda::column_sum(g);
#endif
  return g.sum(0);
}

torch::Tensor bias_grad(const torch::Tensor& g) { return bias_grad(g, /*aten=*/!fused_kernels_on()); }

}  // namespace vdt::kernels
