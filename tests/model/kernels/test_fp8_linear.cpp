// The FP8 linear (model/kernels/fp8_linear.h). On the CPU: the ATen quantization (the reference both backends share)
// against E4M3's precision and an independent transcription of its formula, the emulated linear against the plain
// fp32 linear within FP8's error, and its gradients (dgrad, wgrad, bias; none for a frozen weight) against the
// transcription. On a GPU (skipped without one): the CUDA kernels' quantization bit for bit against ATen's (at the
// column-wise kernels' tile edges, at E4M3's rounding edges, and NaN / inf by class), and the _scaled_mm backend
// against the emulation, forward and backward.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "model/kernels/fp8_linear.h"
#include "model/kernels/fused_ops.h"
#include "test_util.h"

namespace vdt::kernels {
namespace fp8_linear_test {  // named: unity batches compile several test files as one unit

double rel(const torch::Tensor& a, const torch::Tensor& ref) {
  return ((a.to(torch::kFloat64) - ref.to(torch::kFloat64)).abs().max() /
          ref.to(torch::kFloat64).abs().max().clamp_min(1e-30))
      .item<double>();
}

// The recipe written out once more, plainly: t's rows [R, C] -> their dequantized values, float32.
torch::Tensor fake_quant_rows(const torch::Tensor& t) {
  const auto tf = t.to(torch::kFloat32);
  const auto scale = std::get<0>(tf.abs().max(1, /*keepdim=*/true)).clamp_min(1e-12) * (1.0f / 448.0f);
  const auto q = torch::clamp(tf / scale, -448, 448).to(torch::kFloat8_e4m3fn).to(torch::kFloat32);
  return q * scale;
}
// a [M, K] . b [N, K]^T with both fake-quantized along K (+ bias [N]), rounded to bfloat16 as the GEMM's output
torch::Tensor fake_gemm_nt(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias = {}) {
  auto y = fake_quant_rows(a).mm(fake_quant_rows(b).t());
  if (bias.defined()) y = y + bias.to(torch::kFloat32);
  return y.to(torch::kBFloat16);
}

TEST(Fp8Linear, QuantizeRowsKeepsE4M3Precision) {
  torch::manual_seed(1);
  auto t = torch::randn({37, 48}) * torch::logspace(-3, 3, 37).unsqueeze(1);  // rows of very different ranges
  t[5].zero_();
  const auto r = quantize_rows(t, QuantPath::aten);
  ASSERT_EQ(r.q.scalar_type(), torch::kFloat8_e4m3fn);
  ASSERT_EQ(r.q.sizes(), t.sizes());
  ASSERT_EQ(r.scale.sizes(), torch::IntArrayRef({37}));
  const auto deq = r.q.to(torch::kFloat32) * r.scale.unsqueeze(1);
  // Each row's largest magnitude lands on ±448; E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for values in its
  // normal range (>= 2^-6 of the scale), absolute <= 2^-10 scale below (subnormals).
  const auto amax = std::get<0>(t.abs().max(1));
  EXPECT_TRUE(torch::allclose(r.scale, amax.clamp_min(1e-12) * (1.0f / 448.0f), 0, 0));
  EXPECT_TRUE(torch::equal(std::get<0>(r.q.to(torch::kFloat32).abs().max(1)).index({torch::arange(37) != 5}),
                           torch::full({36}, 448.f)));
  const auto err = (deq - t).abs(), bound = torch::maximum(t.abs() * 0.0625, r.scale.unsqueeze(1) * (1.0 / 1024));
  EXPECT_TRUE((err <= bound * 1.0001).all().item<bool>()) << (err / bound).max().item<double>();
  EXPECT_GT(err.max().item<double>(), 0);                 // it does round
  EXPECT_TRUE(torch::equal(deq[5], torch::zeros({48})));  // an all-zero row: zeros, finite scale
  EXPECT_GT(r.scale[5].item<float>(), 0);
  EXPECT_TRUE(torch::equal(deq, fake_quant_rows(t)));
}

TEST(Fp8Linear, QuantizeColsIsTheTransposedRowsZeroPadded) {
  torch::manual_seed(2);
  const auto t = torch::randn({37, 24}).to(torch::kBFloat16);
  const auto c = quantize_cols(t, 16, QuantPath::aten);
  ASSERT_EQ(c.q.sizes(), torch::IntArrayRef({24, 48}));  // 37 tokens padded to 48
  const auto r = quantize_rows(t.t().contiguous(), QuantPath::aten);
  EXPECT_TRUE(torch::equal(c.scale, r.scale));
  EXPECT_TRUE(torch::equal(c.q.slice(1, 0, 37).to(torch::kFloat32), r.q.to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(c.q.slice(1, 37).to(torch::kFloat32), torch::zeros({24, 11})));
  EXPECT_EQ(quantize_cols(t, 1, QuantPath::aten).q.size(1), 37);
}

// The statistics a quantization pass takes on the way: quantize_rows' column maxima are |t|'s, and quantize_cols given
// them (and asked for the column sums) quantizes as without them and sums as the bias gradient's reference.
TEST(Fp8Linear, QuantizationPassesTakeColumnMaximaAndSums) {
  torch::manual_seed(9);
  auto t = (torch::randn({37, 24}) * torch::logspace(-2, 2, 24)).to(torch::kBFloat16);
  t[4].zero_();
  torch::Tensor amax, sum;
  const auto r = quantize_rows(t, QuantPath::aten, &amax);
  EXPECT_TRUE(torch::equal(amax, t.to(torch::kFloat32).abs().amax(0)));
  EXPECT_TRUE(torch::equal(r.q.view(torch::kUInt8), quantize_rows(t, QuantPath::aten).q.view(torch::kUInt8)));
  const auto c = quantize_cols(t, 16, QuantPath::aten, amax, &sum), c0 = quantize_cols(t, 16, QuantPath::aten);
  EXPECT_TRUE(torch::equal(c.scale, c0.scale));
  EXPECT_TRUE(torch::equal(c.q.view(torch::kUInt8), c0.q.view(torch::kUInt8)));
  EXPECT_TRUE(torch::equal(sum, t.sum(0)));
  EXPECT_EQ(sum.scalar_type(), torch::kBFloat16);
  test::expect_error([&] { quantize_cols(t, 16, QuantPath::aten, amax.slice(0, 1)); }, {"col_amax", "[24]"});
  torch::Tensor none;  // an empty operand: zero maxima
  quantize_rows(torch::zeros({0, 5}), QuantPath::aten, &none);
  EXPECT_TRUE(torch::equal(none, torch::zeros({5})));
}

// The emulated FP8 linear stays within FP8's error of the fp32 linear, and is not the fp32 linear.
TEST(Fp8Linear, EmulatedLinearIsCloseToTheFp32Linear) {
  torch::manual_seed(3);
  const auto x = torch::randn({2, 37, 64}), w = torch::randn({48, 64}) * 0.1, b = torch::randn({48});
  const auto y = fp8_linear(x, w, b, Fp8Backend::emulate);
  const auto ref = torch::linear(x, w, b);
  ASSERT_EQ(y.sizes(), ref.sizes());
  ASSERT_EQ(y.scalar_type(), torch::kFloat32);
  const double e = rel(y, ref);
  EXPECT_LT(e, 0.05);
  EXPECT_GT(e, 1e-4);
  // and it is the recipe: x per token, w per output row, the bias added to the fp32 product, rounded to bfloat16
  const auto want = fake_gemm_nt(x.reshape({-1, 64}), w, b).to(torch::kFloat32).view({2, 37, 48});
  EXPECT_TRUE(torch::equal(y, want)) << rel(y, want);
}

// Gradients through the Function: dx = g . w with g per token and w per input column, dw = g^T . x with both per
// column over the tokens, db the plain sum; a frozen weight gets none (and its wgrad is not computed).
TEST(Fp8Linear, GradientsFlowAndMatchTheRecipe) {
  torch::manual_seed(4);
  const int64_t M = 37, K = 64, N = 48;
  const auto x0 = torch::randn({M, K}), w0 = torch::randn({N, K}) * 0.1, b0 = torch::randn({N}),
             g = torch::randn({M, N});
  auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  fp8_linear(x, w, b, Fp8Backend::emulate).backward(g);
  const auto dx_want = fake_gemm_nt(g, w0.t().contiguous()).to(torch::kFloat32);
  const auto dw_want = fake_gemm_nt(g.t().contiguous(), x0.t().contiguous()).to(torch::kFloat32);
  EXPECT_TRUE(torch::equal(x.grad(), dx_want)) << rel(x.grad(), dx_want);
  EXPECT_LT(rel(w.grad(), dw_want), 1e-2);  // the token axis zero-padded to 48: another summation order
  EXPECT_TRUE(torch::allclose(b.grad(), g.sum(0)));
  // and they are close to the fp32 linear's
  auto xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_();
  torch::linear(xr, wr, b0).backward(g);
  EXPECT_LT(rel(x.grad(), xr.grad()), 0.05);
  EXPECT_LT(rel(w.grad(), wr.grad()), 0.05);
  // the same through the LinearImpl's grads (what a selective replay calls)
  Fp8Linear impl(Fp8Backend::emulate);
  const auto r2 = impl.grads(g, x0, w0, true, true, true);
  EXPECT_TRUE(torch::equal(r2.dx, dx_want));
  EXPECT_TRUE(torch::equal(r2.dw, w.grad()));
  EXPECT_TRUE(torch::equal(r2.db, b.grad()));
  EXPECT_EQ(impl.memo().weight_hits(), 0);  // no forward of w0 went before: its dgrad took its own column maxima
  // frozen weight (a LoRA base): only dx
  auto xf = x0.clone().requires_grad_();
  const auto wf = w0.clone();
  fp8_linear(xf, wf, {}, Fp8Backend::emulate).backward(g);
  EXPECT_TRUE(torch::equal(xf.grad(), dx_want));
  EXPECT_FALSE(wf.grad().defined());
  const auto r3 = impl.grads(g, {}, w0, true, false, false);
  EXPECT_TRUE(torch::equal(r3.dx, dx_want));
  EXPECT_FALSE(r3.dw.defined());
  EXPECT_FALSE(r3.db.defined());
  // only db, or only dw and db
  EXPECT_TRUE(torch::equal(impl.grads(g, {}, w0, false, false, true).db, b.grad()));
  const auto r4 = impl.grads(g, x0, w0, false, true, true);
  EXPECT_FALSE(r4.dx.defined());
  EXPECT_TRUE(torch::equal(r4.dw, w.grad()));
  EXPECT_TRUE(torch::equal(r4.db, b.grad()));
  // only the bias trained (x and w frozen): its gradient alone
  auto bb = b0.clone().requires_grad_();
  fp8_linear(x0, w0, bb, Fp8Backend::emulate).backward(g);
  EXPECT_TRUE(torch::allclose(bb.grad(), g.sum(0)));
}

// A linear of gelu(h) (Wan's ffn.2, its input activation handed to the GEMM): forward and every gradient as the linear
// of an explicit gelu(h) followed by GELU's backward, through the Function and through the LinearImpl's grads (what a
// selective replay calls, which never makes gelu(h)); a frozen weight still keeps h for dx; the memo keeps h's and
// gelu(h)'s quantizations apart.
TEST(Fp8Linear, InputActivationIsTheLinearOfItsOutput) {
  torch::manual_seed(11);
  const int64_t M = 37, K = 64, N = 48;
  const auto h0 = torch::randn({M, K}) * 2, w0 = torch::randn({N, K}) * 0.1, b0 = torch::randn({N}),
             g = torch::randn({M, N});
  auto h = h0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  const auto y = fp8_linear(h, w, b, Fp8Backend::emulate, {}, nullptr, InputAct::gelu_tanh);
  y.backward(g);
  auto a = torch::gelu(h0, "tanh").requires_grad_(), wr = w0.clone().requires_grad_(), br = b0.clone().requires_grad_();
  const auto yr = fp8_linear(a, wr, br, Fp8Backend::emulate);
  yr.backward(g);
  EXPECT_TRUE(torch::equal(y, yr));
  EXPECT_TRUE(torch::equal(h.grad(), torch::gelu_backward(a.grad(), h0, "tanh")));
  EXPECT_TRUE(torch::equal(w.grad(), wr.grad()));
  EXPECT_TRUE(torch::equal(b.grad(), br.grad()));
  EXPECT_FALSE(torch::equal(h.grad(), a.grad()));  // GELU's backward did take part
  Fp8Linear impl(Fp8Backend::emulate);
  const auto r = impl.grads(g, h0, w0, true, true, true, InputAct::gelu_tanh);
  EXPECT_TRUE(torch::equal(r.dx, h.grad()));
  EXPECT_TRUE(torch::equal(r.dw, w.grad()));
  EXPECT_TRUE(torch::equal(r.db, b.grad()));
  test::expect_error([&] { impl.grads(g, {}, w0, true, false, false, InputAct::gelu_tanh); }, {"activation", "x"});
  auto hf = h0.clone().requires_grad_();  // frozen weight: dx alone, h kept for GELU's backward
  fp8_linear(hf, w0, {}, Fp8Backend::emulate, {}, nullptr, InputAct::gelu_tanh).backward(g);
  EXPECT_TRUE(torch::equal(hf.grad(), h.grad()));
  Fp8OperandMemo memo;
  const auto plain = memo.rows(h0, QuantPath::aten), act = memo.rows(h0, QuantPath::aten, InputAct::gelu_tanh);
  EXPECT_EQ(memo.hits(), 0);
  EXPECT_FALSE(torch::equal(plain.scale, act.scale));
  memo.rows(h0, QuantPath::aten, InputAct::gelu_tanh);
  EXPECT_EQ(memo.hits(), 1);
}

// The memo hands a quantization back only for the same tensor unchanged: a view of it with the same layout hits; an
// in-place change, another tensor with equal values, another pad or a freed source is quantized afresh.
TEST(Fp8Linear, OperandMemoHandsBackOnlyTheSameUnchangedTensor) {
  torch::manual_seed(7);
  Fp8OperandMemo memo;
  auto t = torch::randn({37, 64});
  const auto a = memo.rows(t, QuantPath::aten);
  const auto b = memo.rows(t.view({37, 64}), QuantPath::aten);
  EXPECT_EQ(memo.hits(), 1);
  EXPECT_TRUE(b.q.is_same(a.q));
  t.add_(1.0);  // the version moves
  const auto c = memo.rows(t, QuantPath::aten);
  EXPECT_EQ(memo.hits(), 1);
  EXPECT_TRUE(torch::equal(c.q.to(torch::kFloat32), quantize_rows(t, QuantPath::aten).q.to(torch::kFloat32)));
  memo.rows(t.clone(), QuantPath::aten);  // equal values, another tensor
  EXPECT_EQ(memo.hits(), 1);
  memo.cols(t, 16, QuantPath::aten);
  memo.cols(t, 16, QuantPath::aten);
  EXPECT_EQ(memo.hits(), 2);
  memo.cols(t, 1, QuantPath::aten);  // another pad
  EXPECT_EQ(memo.hits(), 2);
  for (int i = 0; i < 3; ++i) {  // a source freed and another made (perhaps at its address): never handed back
    const auto v = memo.rows(torch::randn({37, 64}), QuantPath::aten);
    EXPECT_EQ(memo.hits(), 2);
  }
}

// q, k and v multiply one x: through an Fp8Linear its row-wise (forward) and column-wise (wgrad) quantizations are
// made once, and every gradient equals the plain fp8_linear's.
TEST(Fp8Linear, LinearsSharingAnInputQuantizeItOnce) {
  torch::manual_seed(8);
  const int64_t M = 37, K = 64, N = 48;
  const auto x0 = torch::randn({M, K}), g = torch::randn({M, N});
  std::vector<torch::Tensor> ws, bs;
  for (int i = 0; i < 3; ++i) ws.push_back(torch::randn({N, K}) * 0.1), bs.push_back(torch::randn({N}));
  auto run = [&](Fp8Linear* impl) {
    auto x = x0.clone().requires_grad_();
    std::vector<torch::Tensor> w, b;
    torch::Tensor y;
    for (int i = 0; i < 3; ++i) {
      w.push_back(ws[i].clone().requires_grad_()), b.push_back(bs[i].clone().requires_grad_());
      auto yi = impl ? impl->linear(x, w[i], b[i]) : fp8_linear(x, w[i], b[i], Fp8Backend::emulate);
      y = i == 0 ? yi : y + yi;
    }
    y.backward(g);
    std::vector<torch::Tensor> out = {y.detach(), x.grad()};
    for (int i = 0; i < 3; ++i) out.push_back(w[i].grad()), out.push_back(b[i].grad());
    return out;
  };
  Fp8Linear impl(Fp8Backend::emulate);
  const auto with = run(&impl), without = run(nullptr);
  EXPECT_EQ(impl.memo().hits(), 4);         // two forwards and two wgrads of the three
  EXPECT_EQ(impl.memo().weight_hits(), 3);  // each dgrad took its weight's column maxima from the forward
  EXPECT_EQ(impl.memo().maxima_hits(), 1);  // the one wgrad quantization of x took x's maxima from the forward
  for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(torch::equal(with[i], without[i])) << i;
  run(&impl);  // a second step: the entries are replaced, not stacked
  EXPECT_EQ(impl.memo().weight_hits(), 6);
}

// An activation's column maxima, kept by its row-wise quantization, serve its column-wise one (any pad) while it is
// the same tensor, unchanged, with the same activation: the result is the one without them.
TEST(Fp8Linear, OperandMemoHandsActivationMaximaToItsWgrad) {
  torch::manual_seed(13);
  Fp8OperandMemo memo;
  auto t = torch::randn({37, 64}) * 2;
  auto bytes = [](const Fp8Rows& r) { return r.q.view(torch::kUInt8); };
  memo.rows(t, QuantPath::aten, InputAct::none, /*keep_maxima=*/true);
  const auto c = memo.cols(t, 16, QuantPath::aten);
  EXPECT_EQ(memo.maxima_hits(), 1);
  EXPECT_TRUE(torch::equal(bytes(c), bytes(quantize_cols(t, 16, QuantPath::aten))));
  EXPECT_TRUE(torch::equal(c.scale, quantize_cols(t, 16, QuantPath::aten).scale));
  memo.cols(t, 1, QuantPath::aten, InputAct::gelu_tanh);  // another activation: its own maxima
  EXPECT_EQ(memo.maxima_hits(), 1);
  memo.rows(t, QuantPath::aten, InputAct::gelu_tanh, true);
  const auto g = memo.cols(t, 16, QuantPath::aten, InputAct::gelu_tanh);
  EXPECT_EQ(memo.maxima_hits(), 2);
  EXPECT_TRUE(torch::equal(bytes(g), bytes(quantize_cols(t, 16, QuantPath::aten, {}, nullptr, InputAct::gelu_tanh))));
  memo.rows(t, QuantPath::aten, InputAct::none, true);
  t.add_(1.0);  // changed in place since: its own maxima
  EXPECT_TRUE(torch::equal(bytes(memo.cols(t, 1, QuantPath::aten)), bytes(quantize_cols(t, 1, QuantPath::aten))));
  memo.rows(t.clone(), QuantPath::aten, InputAct::none, true);  // equal values, another tensor
  memo.cols(t, 16, QuantPath::aten);
  EXPECT_EQ(memo.maxima_hits(), 2);
}

// A weight's remembered column maxima serve only that weight as its forward saw it: another weight, a view of it with
// another layout, or a weight freed since are quantized with their own maxima.
TEST(Fp8Linear, OperandMemoHandsWeightMaximaOnlyToTheirWeight) {
  torch::manual_seed(10);
  Fp8OperandMemo memo;
  const auto w = torch::randn({48, 64});
  const auto row = memo.weight_rows(w, QuantPath::aten);
  EXPECT_TRUE(torch::equal(row.q.view(torch::kUInt8), quantize_rows(w, QuantPath::aten).q.view(torch::kUInt8)));
  const auto col = memo.weight_cols(w, QuantPath::aten);
  EXPECT_EQ(memo.weight_hits(), 1);
  EXPECT_TRUE(torch::equal(col.q.view(torch::kUInt8), quantize_cols(w, 1, QuantPath::aten).q.view(torch::kUInt8)));
  memo.weight_cols(w.clone(), QuantPath::aten);          // equal values, another tensor
  memo.weight_cols(w.view({64, 48}), QuantPath::aten);   // the same storage, another layout
  memo.weight_cols(w.slice(0, 0, 24), QuantPath::aten);  // a part of it
  EXPECT_EQ(memo.weight_hits(), 1);
  for (int i = 0; i < 40; ++i) memo.weight_rows(torch::randn({16, 16}), QuantPath::aten);  // freed at once: swept
  memo.weight_cols(w, QuantPath::aten);
  EXPECT_EQ(memo.weight_hits(), 2);
}

// A frozen weight held as FP8 (a LoRA's base): its linear gives the same output and input gradient, byte for byte, as
// one re-quantized each call, over two steps (forward, dgrad); its quantizations are made once (at its first forward)
// and handed back after; its own data is released (one element, stride 0, the shape kept); another view of it, a copy
// or a weight not held are quantized as before; another quantization path than the one that made the copies, and a
// weight that trains, are refused.
TEST(Fp8Linear, HeldFrozenWeightGivesTheSameBytesAndReleasesItsData) {
  for (const auto dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(21);
    const auto w = torch::randn({48, 64}).to(dt), b = torch::randn({48}).to(dt);
    const auto held = w.clone(), plain = w.clone();
    Fp8OperandMemo hold_memo, plain_memo;
    hold_memo.hold_frozen(held);
    for (int step = 0; step < 2; ++step) {
      const auto x0 = (torch::randn({2, 37, 64}) * (step + 1)).to(dt);
      const auto g = torch::randn({2, 37, 48}).to(dt);
      auto xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
      const auto ya = fp8_linear(xa, held, b, Fp8Backend::emulate, {}, &hold_memo);
      const auto yb = fp8_linear(xb, plain, b, Fp8Backend::emulate, {}, &plain_memo);
      EXPECT_TRUE(torch::equal(ya, yb)) << "step " << step;
      ya.backward(g), yb.backward(g);
      EXPECT_TRUE(torch::equal(xa.grad(), xb.grad())) << "step " << step;
    }
    EXPECT_EQ(hold_memo.frozen_held(), 1);
    EXPECT_EQ(hold_memo.frozen_hits(), 3);  // step 0's dgrad, step 1's forward and dgrad
    EXPECT_EQ(plain_memo.frozen_hits(), 0);
    EXPECT_EQ(held.sizes(), w.sizes());
    EXPECT_EQ(held.stride(0), 0);
    EXPECT_EQ(held.stride(1), 0);
    EXPECT_LE(held.storage().nbytes(), 4u);
    EXPECT_TRUE(torch::equal(plain, w));  // not held: untouched
    // a copy of the released weight's values is no longer w: the held one is only found by identity
    const auto other = w.clone();
    EXPECT_TRUE(torch::equal(hold_memo.weight_rows(other, QuantPath::aten).q.view(torch::kUInt8),
                             quantize_rows(w, QuantPath::aten).q.view(torch::kUInt8)));
    EXPECT_EQ(hold_memo.frozen_hits(), 3);
    // made by the emulation's ATen path, its data gone: another path cannot quantize it again
    test::expect_error([&] { hold_memo.weight_cols(held, QuantPath::automatic); }, {"held frozen weight", "path"});
  }
  Fp8OperandMemo memo;
  const auto trains = torch::randn({8, 16}).requires_grad_(true);
  test::expect_error([&] { memo.hold_frozen(trains); }, {"hold_frozen", "frozen", "requires a gradient"});
  test::expect_error([&] { memo.hold_frozen(torch::randn({8})); }, {"hold_frozen", "2-D"});
}

// The forward's row-wise copy of an input is for forward GEMMs only (linears sharing it): the backward lets it go
// (a frozen base's block would otherwise keep its last input's copy through the backward and past the step).
TEST(Fp8Linear, BackwardLetsTheForwardsRowWiseCopyGo) {
  for (const bool frozen : {true, false}) {
    torch::manual_seed(5);
    Fp8OperandMemo memo;
    const auto w = torch::randn({48, 64}).requires_grad_(!frozen);  // [out, in]
    const auto x = torch::randn({37, 64}).requires_grad_(true);     // [M, in]
    const auto y = fp8_linear(x, w, {}, Fp8Backend::emulate, {}, &memo);
    const auto q = memo.rows(x, QuantPath::aten).q;  // the forward's copy, handed back
    EXPECT_EQ(memo.hits(), 1);
    EXPECT_TRUE(memo.holds_row_copy());
    EXPECT_EQ(q.use_count(), 2) << "frozen " << frozen;  // ours and the memo's
    y.backward(torch::randn({37, 48}));
    EXPECT_EQ(q.use_count(), 1) << "frozen " << frozen;  // the memo's went with the backward
    EXPECT_FALSE(memo.holds_row_copy());
    memo.rows(x, QuantPath::aten);
    EXPECT_EQ(memo.hits(), 1) << "frozen " << frozen;  // quantized again
    memo.drop_row_copy();                              // what the FP8 block runner does at a block's end
    EXPECT_FALSE(memo.holds_row_copy());
    memo.rows(x, QuantPath::aten);
    EXPECT_EQ(memo.hits(), 1) << "frozen " << frozen;
  }
}

TEST(Fp8Linear, CudaBackendOnTheCpuIsAnErrorNamingTheFlag) {
  const auto x = torch::randn({4, 16}), w = torch::randn({16, 16});
  test::expect_error([&] { fp8_linear(x, w, {}, Fp8Backend::cuda); }, {"--fp8 on", "CUDA", "--fp8 emulate"});
  EXPECT_NE(fp8_unsupported_reason(torch::Device(torch::kCPU)).find("CUDA"), std::string::npos);
}

// --- on a GPU ------------------------------------------------------------------------------------------------------

bool kernels_on_gpu() { return torch::cuda::is_available() && cuda_kernels_built(); }

std::string describe(const torch::Tensor& t) {
  return std::string(t.scalar_type() == torch::kBFloat16 ? "bf16 " : "fp32 ") + std::to_string(t.size(0)) + "x" +
         std::to_string(t.size(1));
}

// The kernels' row-wise and column-wise quantization of t against ATen's, bit for bit, at each pad; and the fused
// passes: the row-wise one's column maxima equal ATen's, the column-wise one given them quantizes as without, and its
// column sums are the bias gradient's (float32 sums in another order, rounded to t's dtype: within two of its ulps of
// the exact sum, plus float32's summation error, R 2^-24 of the sum of magnitudes).
void expect_kernel_equals_aten(const torch::Tensor& t, std::initializer_list<int64_t> pads, const std::string& what) {
  const auto kr = quantize_rows(t), ar = quantize_rows(t, QuantPath::aten);
  EXPECT_TRUE(torch::equal(kr.scale, ar.scale)) << what;
  EXPECT_TRUE(torch::equal(kr.q.view(torch::kUInt8), ar.q.view(torch::kUInt8))) << what;
  torch::Tensor amax;
  const auto fr = quantize_rows(t, QuantPath::automatic, &amax);
  EXPECT_TRUE(torch::equal(fr.scale, ar.scale)) << what << " fused";
  EXPECT_TRUE(torch::equal(fr.q.view(torch::kUInt8), ar.q.view(torch::kUInt8))) << what << " fused";
  EXPECT_TRUE(torch::equal(amax, t.to(torch::kFloat32).abs().amax(0))) << what << " column maxima";
  const double ulp = t.scalar_type() == torch::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -20);
  for (const int64_t pad : pads) {
    const auto kc = quantize_cols(t, pad), ac = quantize_cols(t, pad, QuantPath::aten);
    ASSERT_EQ(kc.q.sizes(), ac.q.sizes()) << what << " pad " << pad;
    EXPECT_TRUE(torch::equal(kc.scale, ac.scale)) << what << " pad " << pad;
    EXPECT_TRUE(torch::equal(kc.q.view(torch::kUInt8), ac.q.view(torch::kUInt8))) << what << " pad " << pad;
    torch::Tensor sum;
    const auto fc = quantize_cols(t, pad, QuantPath::automatic, amax, &sum);
    EXPECT_TRUE(torch::equal(fc.scale, ac.scale)) << what << " pad " << pad << " fused";
    EXPECT_TRUE(torch::equal(fc.q.view(torch::kUInt8), ac.q.view(torch::kUInt8))) << what << " pad " << pad << " fused";
    const auto want = t.to(torch::kFloat64).sum(0);
    const auto bound = 2 * ulp * want.abs() + t.size(0) * std::ldexp(1.0, -24) * t.to(torch::kFloat64).abs().sum(0);
    EXPECT_TRUE(((sum.to(torch::kFloat64) - want).abs() <= bound).all().item<bool>())
        << what << " pad " << pad << " column sums, worst " << ((sum.to(torch::kFloat64) - want).abs() / bound).max();
  }
}

// Shapes around the column-wise kernels' edges (quantize tiles of 128 rows x 64 columns, amax blocks of 128 rows x
// 32 x 8 columns): R and C off the tile sizes, R under one tile, C not a multiple of 8 (bfloat16's one-element
// fallback) or of 4 (float32's), Rp a multiple of 16 (16-byte stores), of 4 only (pad 100: 4-byte stores) or odd
// (byte stores), pads beyond R by whole tiles, a misaligned data pointer. And the row-wise kernels': a warp per row
// with 4, 8, 12 and 16 loads a lane (rows not a multiple of the block's 8, a lane's last load past C), a block per row
// past 16 loads a lane (bfloat16 14336 and 5128, float32 3072 and 4096).
TEST(Fp8LinearCuda, KernelQuantizationEqualsAtenBitForBit) {
  if (!kernels_on_gpu()) GTEST_SKIP() << "needs a GPU and the CUDA kernels";
  const torch::Device dev(torch::kCUDA, 0);
  ASSERT_EQ(fp8_quant_backend(torch::zeros({2, 2}, dev)), "cuda");
  torch::manual_seed(5);
  for (const auto dt : {torch::kBFloat16, torch::kFloat32}) {
    for (const auto& shape : std::vector<std::vector<int64_t>>{{1, 16},
                                                               {37, 48},
                                                               {1029, 3072},
                                                               {300, 1000},
                                                               {5, 13},
                                                               {130, 68},
                                                               {257, 200},
                                                               {2100, 136},
                                                               {1, 8},
                                                               {13, 4096},
                                                               {9, 2056},
                                                               {11, 2048},
                                                               {3, 14336},
                                                               {17, 5128}}) {
      auto t = (torch::randn(shape) * torch::logspace(-2, 2, shape[0]).unsqueeze(1)).to(dt).to(dev);
      if (shape[0] > 3) t[3].zero_();
      expect_kernel_equals_aten(t, {1, 16, 100, 384}, describe(t));
    }
    // one element past an aligned start: the one-element loads though C is a multiple of 8
    const auto flat = torch::randn({37 * 48 + 1}).to(dt).to(dev);
    const auto t = flat.slice(0, 1).view({37, 48});
    ASSERT_NE(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16, 0u);
    expect_kernel_equals_aten(t, {1, 16}, describe(t) + " misaligned");
  }
}

// Kernel quantization q of GELU(t) (`which`: rows, or cols of pad 1 compared as the rows of t^T) against the exact GELU
// g (float64) and ATen's gelu then the plain quantization a. The kernel's GELU is within a few float32 ulps of the
// exact one before its rounding to t's dtype (fp8_quantize_common.cuh): each value v it quantizes lies within e = 2^-8
// |g| + 2^-20 |x| of g, so its scales are max(max |v|, 1e-12) / 448 within max e / 448 of the exact ones, and every
// dequantized value is an FP8 rounding of v: within max(2^-4 |v|, scale 2^-10) + e of g. ATen's GELU differs from the
// exact one in the far negative tail (1 + tanhf(u) cancels to 0 there), where a group of a few values that are all in
// the tail (a column of 1 or 3 rows) takes another scale; groups of at least 4 values: 99 % of the bytes are ATen's.
void expect_gelu_quantization(const Fp8Rows& q, const Fp8Rows& a, const torch::Tensor& t_rows,
                              const std::string& what) {
  const auto x = t_rows.to(torch::kFloat64);
  const auto g = 0.5 * x * (1 + torch::tanh(0.7978845608028654 * (x + 0.044715 * x.pow(3))));  // [R, C]
  const auto e = std::ldexp(1.0, -8) * g.abs() + std::ldexp(1.0, -20) * x.abs();
  const auto ks = q.scale.to(torch::kFloat64);
  const auto exact_scale = g.abs().amax(1).clamp_min(1e-12) / 448;
  EXPECT_TRUE(((ks - exact_scale).abs() <= e.amax(1) / 448 + std::ldexp(1.0, -22) * exact_scale).all().item<bool>())
      << what << " scales";
  if (q.q.size(1) >= 4) {
    const auto same = q.q.view(torch::kUInt8).eq(a.q.view(torch::kUInt8)).to(torch::kFloat64).mean().item<double>();
    EXPECT_GE(same, 0.99) << what << " bytes equal to ATen's";
  }
  const auto deq = q.q.to(torch::kFloat64) * ks.unsqueeze(1);
  const auto bound = torch::maximum((g.abs() + e) * 0.0625, ks.unsqueeze(1) * (1.0 / 1024)) + e;
  const auto err = (deq - g).abs();
  EXPECT_TRUE((err <= bound * 1.0001 + 1e-30).all().item<bool>()) << what << " worst " << (err / bound).max();
}

// The input activation applied on the way (GELU(t) quantized as t is loaded; Wan's ffn.2): row-wise (rows held a block
// each up to 4 loads a thread: bfloat16 14336 is Wan 5B's FFN; wider, unaligned or asked for column maxima: ATen's gelu
// first, bit for bit) and column-wise (both passes on the way; with sums: ATen's gelu first), against ATen's gelu then
// the plain quantization. Values spread over GELU's range (tails and the negative dip).
TEST(Fp8LinearCuda, KernelGeluOnTheWayIsAtensWithinRounding) {
  if (!kernels_on_gpu()) GTEST_SKIP() << "needs a GPU and the CUDA kernels";
  const torch::Device dev(torch::kCUDA, 0);
  torch::manual_seed(12);
  const auto gelu = InputAct::gelu_tanh;
  auto bytes = [](const Fp8Rows& r) { return r.q.view(torch::kUInt8); };
  for (const auto dt : {torch::kBFloat16, torch::kFloat32}) {
    for (const auto& shape : std::vector<std::vector<int64_t>>{
             {37, 48}, {1029, 3072}, {300, 14336}, {5, 13}, {130, 68}, {3, 16392}, {9, 8960}, {1, 8}}) {
      auto t = (torch::randn(shape) * 3).to(dt).to(dev);
      if (shape[0] > 3) t[3].zero_();
      const auto what = describe(t) + " gelu";
      const auto ar = quantize_rows(t, QuantPath::aten, nullptr, gelu);
      expect_gelu_quantization(quantize_rows(t, QuantPath::automatic, nullptr, gelu), ar, t, what + " rows");
      // with column maxima (bfloat16 rows the held-row pass takes: in the same pass; else ATen's gelu first): the
      // quantization is the one without them, the maxima those of the values it quantized (within e of the exact)
      torch::Tensor amax;
      const auto fr = quantize_rows(t, QuantPath::automatic, &amax, gelu);
      const auto kr = quantize_rows(t, QuantPath::automatic, nullptr, gelu);
      const bool held = dt == torch::kBFloat16 && shape[1] % 8 == 0 && shape[1] <= 16384;
      EXPECT_TRUE(torch::equal(bytes(fr), bytes(held ? kr : ar))) << what << " with maxima";
      const auto x64 = t.to(torch::kFloat64);
      const auto g64 = 0.5 * x64 * (1 + torch::tanh(0.7978845608028654 * (x64 + 0.044715 * x64.pow(3))));
      const auto e64 = std::ldexp(1.0, -8) * g64.abs() + std::ldexp(1.0, -20) * x64.abs();
      EXPECT_TRUE(((amax.to(torch::kFloat64) - g64.abs().amax(0)).abs() <= e64.amax(0)).all().item<bool>()) << what;
      const auto kc = quantize_cols(t, 1, QuantPath::automatic, {}, nullptr, gelu);
      const auto ac = quantize_cols(t, 1, QuantPath::aten, {}, nullptr, gelu);
      expect_gelu_quantization(kc, ac, t.t(), what + " cols");
      const auto k16 = quantize_cols(t, 16, QuantPath::automatic, {}, nullptr, gelu);
      EXPECT_TRUE(torch::equal(bytes(k16).slice(1, 0, shape[0]), bytes(kc))) << what << " pad 16";
      EXPECT_TRUE((bytes(k16).slice(1, shape[0]) == 0).all().item<bool>()) << what << " pad 16 zeros";
      torch::Tensor sum;  // with sums: ATen's gelu first, scaled by the given maxima
      const auto sc = quantize_cols(t, 1, QuantPath::automatic, amax, &sum, gelu);
      expect_gelu_quantization(sc, ac, t.t(), what + " cols with sums");
      const auto given =
          quantize_cols(t, 1, QuantPath::automatic, amax, nullptr, gelu);  // maxima given, GELU on the way
      if (held) {
        EXPECT_TRUE(torch::equal(bytes(given), bytes(kc))) << what << " maxima given";
      }
      EXPECT_TRUE(
          torch::allclose(sum.to(torch::kFloat32), torch::gelu(t, "tanh").to(torch::kFloat32).sum(0), 1e-2, 1e-2))
          << what;
    }
    const auto flat = (torch::randn({37 * 48 + 1}) * 3).to(dt).to(dev);  // misaligned: ATen's gelu first
    const auto t = flat.slice(0, 1).view({37, 48});
    EXPECT_TRUE(torch::equal(bytes(quantize_rows(t, QuantPath::automatic, nullptr, gelu)),
                             bytes(quantize_rows(t, QuantPath::aten, nullptr, gelu))));
    EXPECT_TRUE(torch::equal(bytes(quantize_cols(t, 16, QuantPath::automatic, {}, nullptr, gelu)),
                             bytes(quantize_cols(t, 16, QuantPath::aten, {}, nullptr, gelu))));
  }
  // infinities and NaN as ATen's GELU: +inf, NaN (from -inf), NaN; each row's scale and bytes by class
  const auto special = torch::tensor({1.f, INFINITY, -2.f, 0.5f, -INFINITY, 3.f, NAN, -1.f}).to(dev).view({1, 8});
  const auto kr = quantize_rows(special.repeat({2, 1}), QuantPath::automatic, nullptr, gelu);
  EXPECT_TRUE(std::isnan(kr.scale[0].item<float>()));  // a NaN in the row
}

// Rounding edges: every finite E4M3 value and the midpoint between each two neighbours (ties go to even), both signs,
// ±0, and float32's neighbours of the midpoints. In column 0 the largest magnitude is 448, so the scale is exactly 1
// and they reach the conversion unchanged; the other columns scale them (by powers of two, by 3, to below the amax
// floor) or hold zeros or noise. C = 8: the vectorized path for both dtypes.
TEST(Fp8LinearCuda, KernelQuantizationRoundsEdgeValuesAsAten) {
  if (!kernels_on_gpu()) GTEST_SKIP() << "needs a GPU and the CUDA kernels";
  const torch::Device dev(torch::kCUDA, 0);
  const auto e4m3 = torch::arange(127, torch::kUInt8).view(torch::kFloat8_e4m3fn).to(torch::kFloat32);  // 0 .. 448
  const auto mid = (e4m3.slice(0, 1) + e4m3.slice(0, 0, -1)) / 2;
  const auto inf = torch::full_like(mid, INFINITY);
  auto v = torch::cat({e4m3, mid, torch::nextafter(mid, inf), torch::nextafter(mid, -inf)});
  v = torch::cat({v, -v});  // [1010], -0 included
  torch::manual_seed(7);
  const auto t32 = torch::stack({v, v * std::ldexp(1.0, -20), v * 3, v * std::ldexp(1.0, 100), torch::zeros_like(v),
                                 v * 1e-30, torch::randn_like(v), v.flip(0) * 0.7},
                                1);  // [1010, 8]
  ASSERT_EQ(t32.abs().amax(0)[0].item<float>(), 448.f);
  for (const auto dt : {torch::kBFloat16, torch::kFloat32}) {
    const auto t = t32.to(dt).to(dev);
    expect_kernel_equals_aten(t, {1, 16}, describe(t) + " edges");
    // and column 0 is the plain conversion (scale 1)
    const auto c = quantize_cols(t, 1);
    EXPECT_EQ(c.scale[0].item<float>(), 1.f);
    EXPECT_TRUE(torch::equal(c.q[0].view(torch::kUInt8), t.select(1, 0).to(torch::kFloat8_e4m3fn).view(torch::kUInt8)));
  }
}

// A NaN or an infinity in a column: the same NaN scales and the same NaN / zero / value bytes as ATen (compared by
// class, not NaN payload). A NaN column's zero padding differs from ATen's NaN padding (the kernel writes zeros), so
// pad 1 here; an infinite column pads zeros in both.
TEST(Fp8LinearCuda, KernelQuantizationPropagatesNanAndInfAsAten) {
  if (!kernels_on_gpu()) GTEST_SKIP() << "needs a GPU and the CUDA kernels";
  const torch::Device dev(torch::kCUDA, 0);
  torch::manual_seed(8);
  for (const auto dt : {torch::kBFloat16, torch::kFloat32})
    for (const int64_t R : {300, 320}) {  // byte and 16-byte stores
      auto t32 = torch::randn({R, 24});
      t32.index_put_({5, 2}, NAN);
      t32.index_put_({100, 7}, INFINITY);
      t32.index_put_({200, 9}, -INFINITY);
      t32.index_put_({0, 11}, NAN);
      t32.index_put_({1, 11}, INFINITY);
      t32.index_put_({R - 1, 13}, -std::numeric_limits<float>::quiet_NaN());
      const auto t = t32.to(dt).to(dev);
      const auto what = describe(t);
      const auto kc = quantize_cols(t, 1), ac = quantize_cols(t, 1, QuantPath::aten);
      EXPECT_TRUE(torch::allclose(kc.scale, ac.scale, 0, 0, /*equal_nan=*/true)) << what;
      const auto kb = kc.q.view(torch::kUInt8).to(torch::kInt32), ab = ac.q.view(torch::kUInt8).to(torch::kInt32);
      const auto k_nan = kb.bitwise_and(0x7F) == 0x7F, a_nan = ab.bitwise_and(0x7F) == 0x7F;
      EXPECT_TRUE(torch::equal(k_nan, a_nan)) << what;
      EXPECT_TRUE(torch::equal(kb.masked_fill(k_nan, 0), ab.masked_fill(a_nan, 0))) << what;
      // the same data row-wise (t^T: the rows hold the NaNs and infinities; 320 rows give whole 16-byte loads)
      const auto tt = t.t().contiguous();
      const auto kr = quantize_rows(tt), ar = quantize_rows(tt, QuantPath::aten);
      EXPECT_TRUE(torch::allclose(kr.scale, ar.scale, 0, 0, /*equal_nan=*/true)) << what << " rows";
      const auto krb = kr.q.view(torch::kUInt8).to(torch::kInt32), arb = ar.q.view(torch::kUInt8).to(torch::kInt32);
      const auto kr_nan = krb.bitwise_and(0x7F) == 0x7F, ar_nan = arb.bitwise_and(0x7F) == 0x7F;
      EXPECT_TRUE(torch::equal(kr_nan, ar_nan)) << what << " rows";
      EXPECT_TRUE(torch::equal(krb.masked_fill(kr_nan, 0), arb.masked_fill(ar_nan, 0))) << what << " rows";
      // the fused passes' column maxima: NaN where a column holds one (by class), +inf where an infinity, else ATen's;
      // of t (a warp per row for bfloat16) and of t^T (R columns; 300: a block per row, one element at a time)
      for (const auto& m : {t, tt}) {
        torch::Tensor amax;
        quantize_rows(m, QuantPath::automatic, &amax);
        EXPECT_TRUE(torch::allclose(amax, m.to(torch::kFloat32).abs().amax(0), 0, 0, /*equal_nan=*/true))
            << what << " column maxima of " << describe(m);
      }
      // what the data asks for: NaNs in the five columns with a NaN or an infinity, NaN throughout those with a NaN
      const auto nan_cols = torch::tensor({2, 7, 9, 11, 13});
      EXPECT_TRUE(torch::equal(k_nan.any(1).cpu(), torch::zeros({24}, torch::kBool).index_fill_(0, nan_cols, true)));
      EXPECT_TRUE(k_nan.index_select(0, torch::tensor({2, 11, 13}).to(dev)).all().item<bool>()) << what;
    }
}

// The wgrad's fast accumulation at Wan 5B's shapes (8190 tokens: sums of 8192 products, the longest the FP8 GEMMs
// make): against the fp32 product of the unquantized operands, what fast accumulation adds must stay small beside FP8's
// own error (the exact accumulation's), over the whole gradient and in its worst output row. Plain Gaussian operands
// and ones with outliers (a few activation channels 20x, a few tokens' gradients 10x), every Wan linear's shape,
// ffn.2's through GELU. The errors are printed for docs/BENCHMARKS.md.
TEST(Fp8LinearCuda, FastWgradAddsLittleToFp8Error) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device dev(torch::kCUDA, 0);
  if (const auto why = fp8_unsupported_reason(dev); !why.empty()) GTEST_SKIP() << why;
  torch::manual_seed(11);
  const int64_t M = 8190;
  const auto f32 = torch::TensorOptions().device(dev).dtype(torch::kFloat32);
  struct Shape {
    int64_t in, out;
    InputAct act;
    const char* name;
  };
  for (const auto& sh : {Shape{3072, 3072, InputAct::none, "q/k/v/o"}, Shape{3072, 14336, InputAct::none, "ffn.0"},
                         Shape{14336, 3072, InputAct::gelu_tanh, "ffn.2"}}) {
    for (const bool outliers : {false, true}) {
      auto x = torch::randn({M, sh.in}, f32);          // [M, in]
      auto g = torch::randn({M, sh.out}, f32) * 1e-4;  // [M, out]
      if (outliers) {                                  // 8 channels of x, 16 tokens of g
        using torch::indexing::Slice;
        x.index_put_({Slice(), Slice(0, sh.in, sh.in / 8)}, 20 * torch::randn({M, 8}, f32));
        g.index_put_({Slice(0, M, 512)}, 10 * torch::randn({16, sh.out}, f32) * 1e-4);
      }
      x = x.to(torch::kBFloat16);
      g = g.to(torch::kBFloat16);
      const auto w = torch::zeros({sh.out, sh.in}, x.options());  // only its shape and dtype are read by the wgrad
      const auto ref = g.to(torch::kFloat32).t().mm(input_act(x, sh.act).to(torch::kFloat32));  // [out, in]
      auto dw = [&](bool fast) {
        return fp8_linear_grads(g, x, w, false, true, false, Fp8Backend::cuda, {.wgrad = fast}, nullptr, sh.act)
            .dw.to(torch::kFloat32);
      };
      const auto exact = dw(false), fast = dw(true);
      auto worst_row = [&](const torch::Tensor& a) {  // the largest relative error of an output row
        return ((a - ref).norm(2, {1}) / ref.norm(2, {1})).max().item<double>();
      };
      const double e_exact = rel(exact, ref), e_fast = rel(fast, ref);
      const double r_exact = worst_row(exact), r_fast = worst_row(fast);
      std::printf("wgrad %-7s %s: relative error exact %.5f fast %.5f, worst row exact %.5f fast %.5f\n", sh.name,
                  outliers ? "outliers" : "gaussian", e_exact, e_fast, r_exact, r_fast);
      EXPECT_LT(e_fast, 1.25 * e_exact) << sh.name << (outliers ? " outliers" : "");
      EXPECT_LT(r_fast, 1.25 * r_exact) << sh.name << (outliers ? " outliers" : "");
    }
  }
}

// The held frozen base on the GPU (the causal trainer's default): made by the CUDA kernels at its first forward, its
// linear gives the same output and input gradient, byte for byte, as a weight re-quantized each call, over two steps,
// with fast accumulation; its data is released.
TEST(Fp8LinearCuda, HeldFrozenWeightGivesTheSameBytes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device dev(torch::kCUDA, 0);
  if (const auto why = fp8_unsupported_reason(dev); !why.empty()) GTEST_SKIP() << why;
  torch::manual_seed(23);
  const auto opt = torch::TensorOptions().device(dev).dtype(torch::kBFloat16);
  const auto w = torch::randn({384, 256}, opt) * 0.05, b = torch::randn({384}, opt);  // [out, in]
  const auto held = w.clone(), plain = w.clone();
  Fp8OperandMemo hold_memo, plain_memo;
  hold_memo.hold_frozen(held);
  const Fp8FastAccum fast{.forward = true, .dgrad = true, .wgrad = true};
  for (int step = 0; step < 2; ++step) {
    const auto x0 = torch::randn({2, 517, 256}, opt) * (step + 1);  // [B, L, in], B*L not a multiple of 16
    const auto g = torch::randn({2, 517, 384}, opt);                // [B, L, out]
    auto xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
    const auto ya = fp8_linear(xa, held, b, Fp8Backend::cuda, fast, &hold_memo);
    const auto yb = fp8_linear(xb, plain, b, Fp8Backend::cuda, fast, &plain_memo);
    EXPECT_TRUE(torch::equal(ya, yb)) << "step " << step;
    ya.backward(g), yb.backward(g);
    EXPECT_TRUE(torch::equal(xa.grad(), xb.grad())) << "step " << step;
  }
  EXPECT_EQ(hold_memo.frozen_hits(), 3);  // step 0's dgrad, step 1's forward and dgrad
  EXPECT_EQ(held.stride(0), 0);
  EXPECT_EQ(held.sizes(), w.sizes());
}

TEST(Fp8LinearCuda, ScaledMmMatchesTheEmulation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device dev(torch::kCUDA, 0);
  if (const auto why = fp8_unsupported_reason(dev); !why.empty()) GTEST_SKIP() << why;
  torch::manual_seed(6);
  const int64_t M = 1031, K = 256, N = 384;  // M not a multiple of 16: the wgrad's token axis is padded
  const auto opt = torch::TensorOptions().device(dev).dtype(torch::kBFloat16);
  const auto x0 = torch::randn({M, K}, opt), w0 = (torch::randn({N, K}, opt) * 0.05), b0 = torch::randn({N}, opt);
  const auto g = torch::randn({M, N}, opt);
  auto run = [&](Fp8Backend be, Fp8FastAccum accum, InputAct act = InputAct::none) {
    auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Fp8Linear impl(be, accum);  // through the memo: the dgrad's weight maxima come from the forward
    auto y = impl.linear(x, w, b, act);
    y.backward(g);
    EXPECT_EQ(impl.memo().weight_hits(), 1);
    return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const auto cuda = run(Fp8Backend::cuda, {}), emu = run(Fp8Backend::emulate, {});
  const auto fast_fwd = run(Fp8Backend::cuda, {.forward = true});
  const auto fast = run(Fp8Backend::cuda, {.forward = true, .dgrad = true});
  const auto fast_all = run(Fp8Backend::cuda, {.forward = true, .dgrad = true, .wgrad = true});
  const char* names[] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(cuda[i].scalar_type(), torch::kBFloat16) << names[i];
    // the same quantized operands; only the accumulation order and the bfloat16 rounding of the result differ
    EXPECT_LT(rel(cuda[i], emu[i]), 1e-2) << names[i];
    EXPECT_LT(rel(fast[i], emu[i]), 1e-2) << names[i] << " (fast accumulation)";
    EXPECT_LT(rel(fast_all[i], emu[i]), 1e-2) << names[i] << " (fast accumulation, wgrad too)";
  }
  EXPECT_TRUE(torch::equal(fast_fwd[1], cuda[1]));  // dgrad exact unless asked
  EXPECT_TRUE(torch::equal(fast[2], cuda[2]));      // the wgrad exact unless asked
  EXPECT_TRUE(torch::allclose(cuda[3].to(torch::kFloat32), g.to(torch::kFloat32).sum(0), 1e-2, 1e-2));
  // a linear of gelu(x): applied in the quantization kernels on the cuda backend, by ATen first in the emulation
  const auto cuda_act = run(Fp8Backend::cuda, {}, InputAct::gelu_tanh);
  const auto emu_act = run(Fp8Backend::emulate, {}, InputAct::gelu_tanh);
  for (int i = 0; i < 4; ++i) EXPECT_LT(rel(cuda_act[i], emu_act[i]), 1e-2) << names[i] << " (gelu)";
  // against the bf16 linear: FP8's error
  auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  torch::linear(x, w, b0).backward(g);
  EXPECT_LT(rel(cuda[1], x.grad()), 0.08);
  EXPECT_LT(rel(cuda[2], w.grad()), 0.08);
}

}  // namespace fp8_linear_test
}  // namespace vdt::kernels
