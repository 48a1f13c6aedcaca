// The fused q/k RMSNorm + RoPE node (its ATen fallback here; the CUDA kernel too on a CUDA build with a GPU) against
// the reference ops through autograd: outputs, and the gradients of qkv and both norm weights.
#include <torch/torch.h>

#include "model/h3/h3_attention.h"
#include "model/kernels/fused_ops.h"
#include "model/kernels/qk_norm_rope.h"
#include "test_util.h"

namespace vdt::kernels {
namespace qk_norm_rope_test {  // named: unity batches compile several test files as one unit

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm() / b.to(torch::kFloat64).norm().clamp_min(1e-30))
      .item<double>();
}

struct Out {
  torch::Tensor q, k, v, dqkv, dwq, dwk;
};

// S rows, N heads, Dh = 20 channels of which 6R = 18 rotate; qkv a strided view (a GEMM output's rows per head).
Out run(int mode, torch::ScalarType dtype, torch::Device device) {
  torch::manual_seed(21);
  const int64_t S = 7, N = 3, Dh = 20, R = 3;
  auto opt = torch::TensorOptions().dtype(dtype).device(device);
  auto flat = torch::randn({S, N * 3 * Dh}).to(opt).requires_grad_();
  auto qkv = flat.view({S, N, 3, Dh});  // [S, 3*N*Dh] -> [S, N, 3, Dh]
  auto wq = (1 + 0.3 * torch::randn({Dh})).to(opt).requires_grad_(),
       wk = (1 + 0.3 * torch::randn({Dh})).to(opt).requires_grad_();
  auto table = h3_rope_table(torch::randn({S, 3}) * 20, R);
  auto cos = table.cos.to(device), sin = table.sin.to(device);
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> r =
      mode == 0 ? h3_qk_norm_rope_reference(qkv, wq, wk, 1e-6, cos, sin)
                : fused_h3_qk_norm_rope(qkv, wq, wk, 1e-6, cos, sin, /*aten=*/mode == 1);
  auto [q, k, v] = r;
  auto wts = torch::randn({3, S, N, Dh}).to(opt);
  ((q * wts[0]).sum() + (k * wts[1]).sum() + (v * wts[2]).sum()).backward();
  return {q.detach(), k.detach(), v.detach(), flat.grad().view({S, N, 3, Dh}), wq.grad(), wk.grad()};
}

void expect_close(const Out& a, const Out& b, double fwd, double grad, const std::string& what) {
  EXPECT_LE(rel(a.q, b.q), fwd) << what;
  EXPECT_LE(rel(a.k, b.k), fwd) << what;
  EXPECT_TRUE(torch::equal(a.v, b.v)) << what;
  EXPECT_LT(rel(a.dqkv, b.dqkv), grad) << what;
  EXPECT_LT(rel(a.dwq, b.dwq), grad) << what;
  EXPECT_LT(rel(a.dwk, b.dwk), grad) << what;
}

TEST(QkNormRope, FallbackEqualsTheReferenceOpsThroughAutograd) {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    auto ref = run(0, dtype, torch::kCPU), fused = run(1, dtype, torch::kCPU);
    EXPECT_TRUE(torch::equal(fused.q, ref.q) && torch::equal(fused.k, ref.k)) << "the forward runs the same ops";
    expect_close(fused, ref, 0, dtype == torch::kFloat32 ? 1e-5 : 2e-2, c10::toString(dtype));
  }
}

TEST(QkNormRope, CudaKernelEqualsTheReference) {
  if (!torch::cuda::is_available() || !cuda_kernels_built()) GTEST_SKIP() << "needs a GPU and the CUDA kernels";
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    auto ref = run(0, dtype, torch::kCUDA), fused = run(2, dtype, torch::kCUDA);
    expect_close(fused, ref, dtype == torch::kFloat32 ? 1e-6 : 1e-2, dtype == torch::kFloat32 ? 1e-5 : 2e-2,
                 c10::toString(dtype));
  }
}

// A stream's pass (h3_qk_norm_rope_into): k and v land in the cache's rows, q is returned, with the node's numbers bit
// for bit (the CPU copies the node's outputs in; on a GPU the kernel writes k into the rows itself).
TEST(QkNormRope, IntoTheCacheRowsEqualsTheNode) {
  torch::NoGradGuard ng;
  std::vector<torch::Device> devices{torch::kCPU};
  if (torch::cuda::is_available() && cuda_kernels_built()) devices.push_back(torch::kCUDA);
  for (const auto& device : devices)
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      torch::manual_seed(5);
      const int64_t S = 7, N = 3, Dh = 20, R = 3;
      auto opt = torch::TensorOptions().dtype(dtype).device(device);
      auto qkv = torch::randn({S, N * 3 * Dh}).to(opt).view({S, N, 3, Dh});  // [S, 3*N*Dh] -> [S, N, 3, Dh]
      auto wq = (1 + 0.3 * torch::randn({Dh})).to(opt), wk = (1 + 0.3 * torch::randn({Dh})).to(opt);
      auto table = h3_rope_table(torch::randn({S, 3}) * 20, R);
      auto cos = table.cos.to(device), sin = table.sin.to(device);
      auto cache = torch::full({2, 1, S + 4, N, Dh}, 7.0, opt);  // [K|V, B, rows, N, Dh]: 2 kept rows, 2 after
      auto k_rows = cache[0][0].narrow(0, 2, S), v_rows = cache[1][0].narrow(0, 2, S);
      const auto q = h3_qk_norm_rope_into(qkv, wq, wk, 1e-6, cos, sin, k_rows, v_rows);
      auto [q_ref, k_ref, v_ref] = h3_qk_norm_rope(qkv, wq, wk, 1e-6, cos, sin);
      const std::string what = std::string(device.is_cuda() ? "cuda " : "cpu ") + c10::toString(dtype);
      EXPECT_TRUE(torch::equal(q, q_ref)) << what;
      EXPECT_TRUE(torch::equal(k_rows, k_ref)) << what;
      EXPECT_TRUE(torch::equal(v_rows, v_ref)) << what;
      for (int i = 0; i < 2; ++i)  // the rows around the pass's are untouched
        EXPECT_TRUE(torch::equal(torch::cat({cache[i][0].narrow(0, 0, 2), cache[i][0].narrow(0, 2 + S, 2)}),
                                 torch::full({4, N, Dh}, 7.0, opt)))
            << what;
    }
  auto qkv = torch::randn({4, 2, 3, 8});
  auto w = torch::ones({8});
  auto t = torch::zeros({4, 6});
  const auto k_bad = torch::zeros({4, 2, 7}), v = torch::zeros({4, 2, 8});
  test::expect_error([&] { h3_qk_norm_rope_into(qkv, w, w, 1e-6, t, t, k_bad, v); }, {"k_out, v_out [4, 2, 8]"});
}

TEST(QkNormRope, BadShapesAreNamed) {
  auto qkv = torch::randn({4, 2, 3, 8});
  auto w = torch::ones({8});
  auto t = torch::zeros({4, 6});
  test::expect_error(
      [&] {
        fused_h3_qk_norm_rope(qkv.view({4, 6, 8}).unsqueeze(2), w, w, 1e-6, t, t, true);
      },
      {"qkv [S, N, 3, Dh]"});
  test::expect_error([&] { fused_h3_qk_norm_rope(qkv, torch::ones({7}), w, 1e-6, t, t, true); }, {"w_q, w_k [8]"});
  test::expect_error([&] { fused_h3_qk_norm_rope(qkv, w, w, 1e-6, torch::zeros({4, 10}), t, true); }, {"6R <= 8"});
}

}  // namespace qk_norm_rope_test
}  // namespace vdt::kernels
