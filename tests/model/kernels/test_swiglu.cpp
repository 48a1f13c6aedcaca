// The SwiGLU node (model/kernels/swiglu.h) against the reference ops through autograd: its ATen form here, the CUDA
// kernel too on a CUDA build with a GPU; odd widths (no 16-byte packs) and packable ones.
#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#include "model/kernels/swiglu.h"
#include "test_util.h"

namespace vdt::kernels {
namespace swiglu_test {  // named: unity batches compile several test files as one unit

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm() / b.to(torch::kFloat64).norm().clamp_min(1e-30))
      .item<double>();
}

// -> y, dh
std::pair<torch::Tensor, torch::Tensor> run(bool fused, torch::ScalarType dtype, torch::Device device, int64_t F) {
  torch::manual_seed(21);
  const auto opt = torch::TensorOptions().dtype(dtype).device(device);
  auto h = (torch::randn({3, 37, 2 * F}) * 3).to(opt).requires_grad_();
  auto y = fused ? fused_swiglu(h, /*aten=*/!device.is_cuda()) : swiglu_reference(h);
  (y * torch::randn({3, 37, F}).to(opt)).sum().backward();
  return {y.detach(), h.grad()};
}

TEST(Swiglu, FusedEqualsTheReferenceOpsThroughAutograd) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available() && cuda_kernels_built()) devices.push_back(torch::kCUDA);
  for (const auto& device : devices)
    for (auto dtype : {torch::kFloat32, torch::kBFloat16})
      for (int64_t F : {13, 32}) {
        const auto what = device.str() + " " + c10::toString(dtype) + " F " + std::to_string(F);
        const auto [y_ref, dh_ref] = run(false, dtype, device, F);
        const auto [y, dh] = run(true, dtype, device, F);
        ASSERT_EQ(y.sizes(), y_ref.sizes()) << what;
        // CPU: the same ops forward; CUDA: float32 math with the same roundings (expf may differ in the last bit)
        EXPECT_LE(rel(y, y_ref), !device.is_cuda() ? 0 : dtype == torch::kFloat32 ? 1e-6 : 5e-3) << what;
        EXPECT_LE(rel(dh, dh_ref), dtype == torch::kFloat32 ? 1e-6 : 5e-3) << what;
      }
}

TEST(Swiglu, CpuRunsTheReferenceAndOddWidthsAreNamed) {
  auto h = torch::randn({2, 8}).requires_grad_();
  const auto name = swiglu(h).grad_fn()->name();
  EXPECT_EQ(name.find("SwigluFn"), std::string::npos) << name;
  test::expect_error([&] { fused_swiglu(torch::randn({2, 7}), true); }, {"h [..., 2F]"});
}

}  // namespace swiglu_test
}  // namespace vdt::kernels
