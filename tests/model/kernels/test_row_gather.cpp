// The row gather (model/kernels/row_gather.h) against index_select: forward and gradient (its ATen backward here; the
// CUDA kernel too on a CUDA build with a GPU).
#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#include "model/kernels/row_gather.h"
#include "test_util.h"

namespace vdt::kernels {
namespace row_gather_test {  // named: unity batches compile several test files as one unit

std::vector<torch::Device> devices() {
  std::vector<torch::Device> d = {torch::kCPU};
  if (torch::cuda::is_available() && cuda_kernels_built()) d.push_back(torch::kCUDA);
  return d;
}

// Repeated ids, an unused row (row 3 of 5), and widths with and without 16-byte packs.
TEST(GatherRows, GradientEqualsIndexSelects) {
  for (const auto& device : devices())
    for (auto dtype : {torch::kFloat32, torch::kBFloat16})
      for (int64_t width : {7, 16}) {
        const auto what = device.str() + " " + c10::toString(dtype) + " width " + std::to_string(width);
        torch::manual_seed(7);
        const auto opt = torch::TensorOptions().dtype(dtype).device(device);
        const auto ids = torch::tensor({0, 2, 2, 4, 1, 0, 2}, torch::kLong).to(device);
        const auto rows0 = torch::randn({5, 3, width}).to(opt);
        const auto g = torch::randn({7, 3, width}).to(opt);
        auto a = rows0.clone().requires_grad_(), b = rows0.clone().requires_grad_();
        auto ya = fused_gather_rows(a, ids, /*aten=*/!device.is_cuda());
        auto yb = b.index_select(0, ids);
        EXPECT_TRUE(torch::equal(ya, yb)) << what;
        (ya * g).sum().backward();
        (yb * g).sum().backward();
        const double tol = dtype == torch::kFloat32 ? 1e-6 : 1e-2;  // the kernel sums in float32, ATen in bfloat16
        EXPECT_LE((a.grad() - b.grad()).abs().max().item<double>(), tol * (1 + b.grad().abs().max().item<double>()))
            << what;
        EXPECT_EQ(a.grad()[3].abs().sum().item<double>(), 0.0) << what << ": a row no id names gets zeros";
      }
}

TEST(GatherRows, CpuAndSwitchOffRunIndexSelect) {
  auto rows = torch::randn({3, 4}).requires_grad_();
  const auto ids = torch::tensor({2, 0}, torch::kLong);
  EXPECT_EQ(gather_rows(rows, ids).grad_fn()->name().find("GatherRowsFn"), std::string::npos);
  EXPECT_FALSE(cuda_kernels_take(rows));
  test::expect_error([&] { fused_gather_rows(rows, ids.to(torch::kInt), true); }, {"ids [N] int64"});
}

}  // namespace row_gather_test
}  // namespace vdt::kernels
