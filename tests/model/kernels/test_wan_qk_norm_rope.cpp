// The fused Wan q/k RMSNorm + RoPE node (its ATen fallback here; the CUDA kernel too on a CUDA build with a GPU)
// against the reference ops through autograd: outputs, and the gradients of both inputs and both norm weights; the
// switch; SelfAttention on and off.
#include <torch/torch.h>

#include <array>

#include "model/attention.h"
#include "model/embeddings.h"
#include "model/kernels/fused_ops.h"
#include "model/kernels/wan_qk_norm_rope.h"
#include "test_util.h"

namespace vdt::kernels {
namespace wan_qk_norm_rope_test {  // named: unity batches compile several test files as one unit

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm() / b.to(torch::kFloat64).norm().clamp_min(1e-30))
      .item<double>();
}

struct Out {
  torch::Tensor q, k, dq, dk, dwq, dwk;
};

struct Shape {
  int64_t B, N, Dh;
  std::array<int64_t, 3> grid;
};

// mode 0: reference, 1: ATen fallback, 2: automatic (the CUDA kernel on a GPU). Weights frozen when !train_w.
Out run(int mode, torch::ScalarType dtype, torch::Device device, const Shape& sh, bool train_w = true) {
  torch::manual_seed(33);
  const auto rope = rope_table(sh.Dh, sh.grid, device);
  const int64_t L = rope.cos.size(0), D = sh.N * sh.Dh;
  auto opt = torch::TensorOptions().dtype(dtype).device(device);
  auto xq = (torch::randn({sh.B, L, D}) * 2 + 0.1).to(opt).requires_grad_();
  auto xk = (torch::randn({sh.B, L, D}) * 0.5).to(opt).requires_grad_();
  auto wq = (1 + 0.3 * torch::randn({D})).to(opt).requires_grad_(train_w);
  auto wk = (1 + 0.3 * torch::randn({D})).to(opt).requires_grad_(train_w);
  std::tuple<torch::Tensor, torch::Tensor> r =
      mode == 0 ? wan_qk_norm_rope_reference(xq, xk, wq, wk, 1e-6, rope.cos, rope.sin, sh.N)
                : fused_wan_qk_norm_rope(xq, xk, wq, wk, 1e-6, rope.cos, rope.sin, sh.N, /*aten=*/mode == 1);
  auto [q, k] = r;
  auto wts = torch::randn({2, sh.B, L, sh.N, sh.Dh}).to(opt);
  ((q * wts[0]).sum() + (k * wts[1]).sum()).backward();
  return {q.detach(), k.detach(), xq.grad(), xk.grad(), wq.grad(), wk.grad()};
}

void expect_close(const Out& a, const Out& b, double fwd, double grad, const std::string& what) {
  ASSERT_EQ(a.q.sizes(), b.q.sizes()) << what;
  EXPECT_EQ(a.q.scalar_type(), b.q.scalar_type()) << what;
  EXPECT_TRUE(a.q.is_contiguous() && a.k.is_contiguous()) << what;
  EXPECT_LE(rel(a.q, b.q), fwd) << what;
  EXPECT_LE(rel(a.k, b.k), fwd) << what;
  EXPECT_LT(rel(a.dq, b.dq), grad) << what;
  EXPECT_LT(rel(a.dk, b.dk), grad) << what;
  ASSERT_EQ(a.dwq.defined(), b.dwq.defined()) << what;
  if (b.dwq.defined()) {
    EXPECT_EQ(a.dwq.scalar_type(), b.dwq.scalar_type()) << what;
    EXPECT_LT(rel(a.dwq, b.dwq), grad) << what;
    EXPECT_LT(rel(a.dwk, b.dwk), grad) << what;
  }
}

// D = 36 (not a multiple of a 16-byte vector in either dtype) and D = 48 (vectorizable); Dh 12 and 24 split 4/4/4 and
// 8/8/8 over the three axes.
const Shape kOdd{2, 3, 12, {2, 3, 4}}, kVec{1, 2, 24, {3, 2, 5}};

TEST(WanQkNormRope, FallbackEqualsTheReferenceOpsThroughAutograd) {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (const auto& sh : {kOdd, kVec})
      for (bool train_w : {true, false}) {
        const auto what = std::string(c10::toString(dtype)) + " D " + std::to_string(sh.N * sh.Dh) +
                          (train_w ? "" : " frozen weights");
        auto ref = run(0, dtype, torch::kCPU, sh, train_w), fused = run(1, dtype, torch::kCPU, sh, train_w);
        EXPECT_TRUE(torch::equal(fused.q, ref.q) && torch::equal(fused.k, ref.k)) << "the forward runs the same ops";
        expect_close(fused, ref, 0, dtype == torch::kFloat32 ? 1e-5 : 2e-2, what);
      }
}

TEST(WanQkNormRope, CudaKernelEqualsTheReference) {
  if (!torch::cuda::is_available() || !cuda_kernels_built()) GTEST_SKIP() << "needs a GPU and the CUDA kernels";
  ASSERT_EQ(wan_qk_backend(torch::zeros({1, 1, 8}, torch::kCUDA), torch::zeros({8}, torch::kCUDA)), "cuda");
  // kLong: 600 token rows, more than the backward's weight-gradient blocks (4 per SM), so blocks walk several rows.
  // kStraddle: Dh 12, so a bfloat16 vector of 8 spans two heads. kWide: D 2400, several rounds per thread with a
  // partial last round (bf16: 300 vectors on 160 threads; fp32: 600 on 224).
  const Shape kLong{2, 4, 64, {3, 10, 10}}, kStraddle{1, 4, 12, {2, 3, 4}}, kWide{1, 20, 120, {2, 4, 4}};
  for (auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (const auto& sh : {kOdd, kVec, kLong, kStraddle, kWide})
      for (bool train_w : {true, false}) {
        const auto what = std::string(c10::toString(dtype)) + " D " + std::to_string(sh.N * sh.Dh) +
                          (train_w ? "" : " frozen weights");
        auto ref = run(0, dtype, torch::kCUDA, sh, train_w), fused = run(2, dtype, torch::kCUDA, sh, train_w);
        expect_close(fused, ref, dtype == torch::kFloat32 ? 1e-6 : 1e-2, dtype == torch::kFloat32 ? 1e-5 : 2e-2, what);
      }
}

// The switch picks the node: fused (one custom backward node for q and k) when on, the reference ops when off.
TEST(WanQkNormRope, SwitchPicksFusedOrReference) {
  const auto rope = rope_table(12, {2, 3, 4}, torch::kCPU);
  auto x = torch::randn({1, 24, 36}).requires_grad_();
  auto w = torch::ones({36});
  auto node = [&] { return std::get<0>(wan_qk_norm_rope(x, x, w, w, 1e-6, rope.cos, rope.sin, 3)).grad_fn()->name(); };
  const auto on = [&] {
    const FusedKernelsScope fused(true);
    return node();
  }();
  const auto off = [&] {
    const FusedKernelsScope fused(false);
    return node();
  }();
  EXPECT_NE(on.find("WanQkNormRopeFn"), std::string::npos) << on;
  EXPECT_EQ(off.find("WanQkNormRopeFn"), std::string::npos) << off;
}

// SelfAttention with the switch on (the fused node) and off (norm_q / norm_k and apply_rope, as before): the same
// output and close gradients of the input and of the norm weights.
TEST(WanQkNormRope, SelfAttentionOnEqualsOff) {
  torch::manual_seed(5);
  const auto rope = rope_table(12, {2, 3, 4}, torch::kCPU);
  SelfAttention attn(36, 3, 1e-6);
  {
    torch::NoGradGuard ng;
    attn->norm_q->weight.uniform_(0.5, 1.5);
    attn->norm_k->weight.uniform_(0.5, 1.5);
  }
  const auto x0 = torch::randn({2, 24, 36});
  auto pass = [&](bool on) {
    FusedKernelsScope scope(on);
    attn->zero_grad();
    auto x = x0.clone().requires_grad_();
    auto y = attn->forward(x, rope);
    (y * y).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), x.grad(), attn->norm_q->weight.grad().clone(),
                                      attn->norm_k->weight.grad().clone(), attn->q->weight.grad().clone()};
  };
  const auto on = pass(true), off = pass(false);
  EXPECT_TRUE(torch::equal(on[0], off[0]));
  for (size_t i = 1; i < on.size(); ++i) EXPECT_LT(rel(on[i], off[i]), 1e-5) << "gradient " << i;
}

TEST(WanQkNormRope, BadShapesAreNamed) {
  const auto rope = rope_table(12, {2, 3, 4}, torch::kCPU);
  auto x = torch::randn({1, 24, 36});
  auto w = torch::ones({36});
  test::expect_error([&] { fused_wan_qk_norm_rope(x[0], x[0], w, w, 1e-6, rope.cos, rope.sin, 3, true); },
                     {"q_in, k_in [B, L, D]"});
  test::expect_error([&] { fused_wan_qk_norm_rope(x, x, w, w, 1e-6, rope.cos, rope.sin, 5, true); }, {"into 5 heads"});
  test::expect_error([&] { fused_wan_qk_norm_rope(x, x, torch::ones({35}), w, 1e-6, rope.cos, rope.sin, 3, true); },
                     {"w_q, w_k [36]"});
  test::expect_error([&] { fused_wan_qk_norm_rope(x, x, w, w, 1e-6, rope.cos.narrow(0, 0, 20), rope.sin, 3, true); },
                     {"cos, sin [L=24, Dh/2=6]"});
}

// The plain norm (cross-attention's q / k: the same kernels without RoPE). mode 0: reference, 1: the node's ATen
// fallback, 2: automatic (the CUDA kernel on a GPU). -> y, dx, dw (undefined when frozen).
std::vector<torch::Tensor> run_norm(int mode, torch::ScalarType dtype, torch::Device device, int64_t L, int64_t D,
                                    bool train_w) {
  torch::manual_seed(34);
  auto opt = torch::TensorOptions().dtype(dtype).device(device);
  auto x = (torch::randn({2, L, D}) * 2 + 0.1).to(opt).requires_grad_();
  auto w = (1 + 0.3 * torch::randn({D})).to(opt).requires_grad_(train_w);
  auto y = mode == 0 ? wan_rms_norm_reference(x, w, 1e-6) : fused_wan_rms_norm(x, w, 1e-6, /*aten=*/mode == 1);
  (y * torch::randn({2, L, D}).to(opt)).sum().backward();
  return {y.detach(), x.grad(), w.grad()};
}

TEST(WanRmsNorm, FallbackAndCudaKernelEqualTheReference) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available() && cuda_kernels_built()) devices.push_back(torch::kCUDA);
  for (const auto& device : devices)
    for (auto dtype : {torch::kFloat32, torch::kBFloat16})
      for (int64_t D :
           {36, 48, 2400})  // not a 16-byte multiple in either dtype; vectorizable; several rounds per thread
        for (bool train_w : {true, false}) {
          const auto what =
              device.str() + " " + c10::toString(dtype) + " D " + std::to_string(D) + (train_w ? "" : " frozen weight");
          const auto ref = run_norm(0, dtype, device, 300, D, train_w);
          const auto got = run_norm(device.is_cuda() ? 2 : 1, dtype, device, 300, D, train_w);
          const double grad_tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
          const double fwd_tol = !device.is_cuda() ? 0 : dtype == torch::kFloat32 ? 1e-6 : 1e-2;  // CPU: same ops
          EXPECT_LE(rel(got[0], ref[0]), fwd_tol) << what;
          EXPECT_LT(rel(got[1], ref[1]), grad_tol) << what;
          ASSERT_EQ(got[2].defined(), train_w) << what;
          if (train_w) {
            EXPECT_LT(rel(got[2], ref[2]), grad_tol) << what;
          }
        }
}

// RMSNormImpl (cross-attention's norms) runs the node only where the CUDA kernel does: on the CPU the reference ops.
TEST(WanRmsNorm, CpuRunsTheReferenceOps) {
  auto x = torch::randn({1, 4, 8}).requires_grad_();
  auto w = torch::ones({8}).requires_grad_();
  const auto name = wan_rms_norm(x, w, 1e-6).grad_fn()->name();
  EXPECT_EQ(name.find("WanRmsNormFn"), std::string::npos) << name;
  test::expect_error([&] { fused_wan_rms_norm(x, torch::ones({7}), 1e-6, true); }, {"w [D] of x's dtype"});
}

}  // namespace wan_qk_norm_rope_test
}  // namespace vdt::kernels
