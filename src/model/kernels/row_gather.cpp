// The row gather (row_gather.h): dispatch, the node and its two backwards (the kernel, ATen's index_add_).
#include "model/kernels/row_gather.h"

#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#ifdef VDT_WITH_CUDA_KERNELS
#include "model/kernels/row_gather_cuda.h"
#endif

namespace vdt::kernels {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct GatherRowsFn : torch::autograd::Function<GatherRowsFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& rows, const Tensor& ids, bool cuda) {
    ctx->save_for_backward({ids});
    ctx->saved_data["rows"] = rows.size(0);
    ctx->saved_data["cuda"] = cuda;
    return {rows.index_select(0, ids)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto ids = ctx->get_saved_variables()[0];
    const int64_t R = ctx->saved_data["rows"].toInt(), N = ids.size(0);
    const auto& g = grads[0];  // [N, ...]
    auto sizes = g.sizes().vec();
    sizes[0] = R;
    Tensor d;
    if (ctx->saved_data["cuda"].toBool()) {
#ifdef VDT_WITH_CUDA_KERNELS
      d = cuda::gather_rows_backward(g.reshape({N, -1}), ids, R).view(sizes);  // [N, K] -> [R, K] -> [R, ...]
#endif
    } else {
      d = torch::zeros(sizes, g.options()).index_add_(0, ids, g);  // index_select's own backward
    }
    return {d, Tensor(), Tensor()};
  }
};

}  // namespace

Tensor fused_gather_rows(const Tensor& rows, const Tensor& ids, bool aten) {
  TORCH_CHECK(rows.dim() >= 1 && ids.dim() == 1 && ids.scalar_type() == torch::kLong, "gather_rows: expected rows ",
              "[R, ...] and ids [N] int64, got ", rows.sizes(), " and ", ids.sizes(), " ", ids.scalar_type());
  return GatherRowsFn::apply(rows, ids, !aten && cuda_kernels_take(rows))[0];
}

Tensor gather_rows(const Tensor& rows, const Tensor& ids) {
  if (!fused_kernels_on() || !cuda_kernels_take(rows)) return rows.index_select(0, ids);
  return fused_gather_rows(rows, ids, /*aten=*/false);
}

}  // namespace vdt::kernels
