// The bias gradient (model/kernels/bias_grad.h) against the float64 column sum: the ATen path everywhere, the CUDA
// kernel on a CUDA build with a GPU (16-byte packs and element-wise widths, a row count that leaves a short last
// slice, one row, none). Its use (selective checkpointing's kept linears) is covered by the selective gradient tests.
#include <torch/torch.h>

#include "model/kernels/bias_grad.h"
#include "model/kernels/fused_ops.h"
#include "test_util.h"

namespace vdt::kernels {
namespace bias_grad_test {  // named: unity batches compile several test files as one unit

TEST(BiasGrad, EqualsTheColumnSum) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available() && cuda_kernels_built()) devices.push_back(torch::kCUDA);
  for (const auto& device : devices)
    for (auto dtype : {torch::kFloat32, torch::kBFloat16})
      for (auto [rows, cols] :
           std::vector<std::pair<int64_t, int64_t>>{{1037, 48}, {1037, 7}, {1, 16}, {0, 8}, {4099, 264}}) {
        const auto what =
            device.str() + " " + c10::toString(dtype) + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
        torch::manual_seed(3);
        const auto g = (torch::randn({rows, cols}) + 0.5).to(torch::TensorOptions().dtype(dtype).device(device));
        const auto truth = g.to(torch::kFloat64).sum(0);
        for (bool aten : {true, false}) {
          const auto b = bias_grad(g, aten);
          ASSERT_EQ(b.scalar_type(), dtype) << what;
          ASSERT_EQ(b.sizes(), torch::IntArrayRef({cols})) << what;
          const double tol = (dtype == torch::kFloat32 ? 1e-5 : 1e-2) * (1 + truth.abs().max().item<double>());
          EXPECT_LE((b.to(torch::kFloat64) - truth).abs().max().item<double>(), tol) << what << " aten " << aten;
        }
      }
  test::expect_error([] { bias_grad(torch::zeros({2, 3, 4})); }, {"bias_grad", "[N, C]"});
}

}  // namespace bias_grad_test
}  // namespace vdt::kernels
