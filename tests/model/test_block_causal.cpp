// Block-causal attention: the per-chunk prefix path, the one-call masked path and the eager reference agree in
// forward and backward; the masks have the structure they claim (chunk i sees 0..i; teacher forcing: noisy i sees
// clean 0..i-1 and itself).
#include <torch/torch.h>

#include "core/rng.h"
#include "model/block_causal.h"
#include "model/wan_dit.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(BlockCausal, MaskStructure) {
  const auto m = block_causal_mask(3, 2);
  ASSERT_EQ(m.sizes(), (std::vector<int64_t>{6, 6}));
  for (int64_t qi = 0; qi < 6; ++qi)
    for (int64_t ki = 0; ki < 6; ++ki) EXPECT_EQ(m[qi][ki].item<bool>(), ki / 2 <= qi / 2) << qi << "," << ki;
  const auto tf = teacher_forcing_mask(3, 2);  // [clean 0..2 | noisy 0..2], 2 tokens each
  ASSERT_EQ(tf.size(0), 12);
  for (int64_t qi = 0; qi < 12; ++qi)
    for (int64_t ki = 0; ki < 12; ++ki) {
      const bool q_noisy = qi >= 6, k_noisy = ki >= 6;
      const int64_t qc = (qi % 6) / 2, kc = (ki % 6) / 2;
      const bool want = !q_noisy ? (!k_noisy && kc <= qc) : (k_noisy ? kc == qc : kc < qc);
      EXPECT_EQ(tf[qi][ki].item<bool>(), want) << qi << "," << ki;
    }
  test::expect_error([] { causal_kernel_from_string("flash"); }, {"--attn flash", "prefix or mask"});
  EXPECT_EQ(causal_kernel_from_string("fa3"), CausalKernel::prefix);  // the Python trainer's names
  EXPECT_EQ(causal_kernel_from_string("flex"), CausalKernel::mask);
}

TEST(BlockCausal, PrefixMaskAndEagerAgreeForwardAndBackward) {
  torch::manual_seed(0);
  const int64_t B = 2, N = 3, chunk = 5, n = 4, Dh = 16;
  const auto q0 = torch::randn({B, N, n * chunk, Dh}, torch::kFloat64);
  const auto k0 = torch::randn_like(q0), v0 = torch::randn_like(q0), g = torch::randn_like(q0);
  std::vector<std::vector<torch::Tensor>> results;
  for (auto kernel : {CausalKernel::eager, CausalKernel::prefix, CausalKernel::mask}) {
    auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    auto y = block_causal_attention(q, k, v, chunk, kernel);
    y.backward(g);
    results.push_back({y.detach(), q.grad(), k.grad(), v.grad()});
  }
  for (size_t r = 1; r < results.size(); ++r)
    for (size_t t = 0; t < 4; ++t)
      EXPECT_TRUE(torch::allclose(results[r][t], results[0][t], 1e-9, 1e-9)) << "kernel " << r << " tensor " << t;
  // Chunk 0's output does not depend on later chunks.
  auto k2 = k0.clone(), v2 = v0.clone();
  k2.narrow(2, chunk, chunk * (n - 1)).normal_();
  v2.narrow(2, chunk, chunk * (n - 1)).normal_();
  const auto a = block_causal_attention(q0, k0, v0, chunk, CausalKernel::prefix).narrow(2, 0, chunk);
  const auto b = block_causal_attention(q0, k2, v2, chunk, CausalKernel::prefix).narrow(2, 0, chunk);
  EXPECT_TRUE(torch::allclose(a, b, 0, 0));
}

TEST(BlockCausal, TeacherForcingMaskIsUsableByTheMaskedKernel) {
  torch::manual_seed(1);
  const int64_t chunk = 3, n = 3;
  const auto q = torch::randn({1, 2, 2 * n * chunk, 8}, torch::kFloat64), k = torch::randn_like(q),
             v = torch::randn_like(q);
  const auto mask = teacher_forcing_mask(n, chunk);
  const auto ref = masked_attention_eager(q, k, v, mask);
  const auto fast = at::scaled_dot_product_attention(q, k, v, mask);
  EXPECT_TRUE(torch::allclose(fast, ref, 1e-9, 1e-9));
}

// Teacher forcing through block_causal_attention: prefix (clean half block-causal, each noisy chunk over its clean
// prefix plus itself), mask and eager agree forward and backward.
TEST(BlockCausal, TeacherForcingKernelsAgreeForwardAndBackward) {
  torch::manual_seed(2);
  const int64_t chunk = 4, n = 3;
  const auto q0 = torch::randn({2, 2, 2 * n * chunk, 8}, torch::kFloat64);
  const auto k0 = torch::randn_like(q0), v0 = torch::randn_like(q0), g = torch::randn_like(q0);
  std::vector<std::vector<torch::Tensor>> results;
  for (auto kernel : {CausalKernel::eager, CausalKernel::prefix, CausalKernel::mask}) {
    auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    auto y = block_causal_attention(q, k, v, chunk, kernel, /*teacher_forcing=*/true);
    y.backward(g);
    results.push_back({y.detach(), q.grad(), k.grad(), v.grad()});
  }
  const auto direct = masked_attention_eager(q0, k0, v0, teacher_forcing_mask(n, chunk));
  EXPECT_TRUE(torch::allclose(results[0][0], direct, 1e-12, 1e-12));
  for (size_t r = 1; r < results.size(); ++r)
    for (size_t t = 0; t < 4; ++t)
      EXPECT_TRUE(torch::allclose(results[r][t], results[0][t], 1e-9, 1e-9)) << "kernel " << r << " tensor " << t;
}

}  // namespace
}  // namespace vdt

namespace vdt {
namespace {

// The tiny DiT from a fixed seed, its zero-initialised head made non-zero so outputs depend on the input.
WanDiT tiny_with_head() {
  WanDiT model(preset_config("tiny"));
  model->init_weights(1);
  torch::NoGradGuard ng;
  model->head->head->weight.normal_(0, 0.05, make_generator(torch::kCPU, 3));
  return model;
}

// The Wan DiT in causal mode: a chunk's output does not depend on later frames; prefix, mask and eager kernels agree;
// block checkpointing gives the same output and gradients as the plain backward.
TEST(BlockCausal, WanDiTChunksSeeOnlyThePast) {
  torch::manual_seed(0);
  auto model = tiny_with_head();
  auto x = torch::randn({1, 16, 4, 4, 4}), ctx = torch::randn({1, 5, 64});
  const auto t = torch::tensor({{0.0, 300.0, 600.0, 900.0}});  // [B, F'] a level per frame
  DenoiserInputs in{x, t, ctx};
  in.attention = AttentionPattern::block_causal(2);  // 2 chunks of 2 latent frames (2 x 2 x 2 = 8 tokens each)
  const auto y = model->forward(in);
  auto x2 = x.clone();
  x2.narrow(2, 2, 2).normal_();  // change chunk 1 only
  in.x = x2;
  const auto y2 = model->forward(in);
  EXPECT_TRUE(torch::allclose(y.narrow(2, 0, 2), y2.narrow(2, 0, 2), 1e-6, 1e-6));  // chunk 0 unchanged
  EXPECT_GT((y.narrow(2, 2, 2) - y2.narrow(2, 2, 2)).abs().max().item<double>(), 1e-3);
  // A bidirectional forward differs in chunk 0 (it sees chunk 1).
  DenoiserInputs bi{x, t, ctx};
  EXPECT_GT((model->forward(bi).narrow(2, 0, 2) - y.narrow(2, 0, 2)).abs().max().item<double>(), 1e-4);
  in.x = x;
  model->set_causal_kernel(CausalKernel::mask);
  EXPECT_TRUE(torch::allclose(model->forward(in), y, 1e-5, 1e-5));
  model->set_attention_kernel(AttentionKernel::eager);
  EXPECT_TRUE(torch::allclose(model->forward(in), y, 1e-5, 1e-5));
  in.attention = AttentionPattern::block_causal(3);
  test::expect_error([&] { model->forward(in); }, {"4 latent frames", "chunks of 3"});
}

// Teacher forcing in the DiT: x = [clean span | noisy span]. The clean half equals a block-causal forward of the clean
// span alone (same RoPE positions), and noisy chunk i depends on clean chunks < i and on itself only.
TEST(BlockCausal, WanDiTTeacherForcingSeesCleanPastAndItself) {
  torch::manual_seed(0);
  auto model = tiny_with_head();
  const int64_t F = 4;  // 2 chunks of 2 frames
  auto clean = torch::randn({1, 16, F, 4, 4}), noisy = torch::randn({1, 16, F, 4, 4}), ctx = torch::randn({1, 5, 64});
  const auto t_noisy = torch::tensor({{500.0, 500.0, 800.0, 800.0}});
  DenoiserInputs tf{torch::cat({clean, noisy}, 2), torch::cat({torch::zeros({1, F}), t_noisy}, 1), ctx};
  tf.attention = AttentionPattern::forcing(2, true);
  const auto y = model->forward(tf);  // [1, 16, 2F, 4, 4]
  DenoiserInputs alone{clean, torch::zeros({1, F}), ctx};
  alone.attention = AttentionPattern::block_causal(2);
  EXPECT_TRUE(torch::allclose(y.narrow(2, 0, F), model->forward(alone), 1e-5, 1e-5));
  // Noisy chunk 0 (frames F..F+1): unchanged when clean chunk 0 or noisy chunk 1 changes.
  auto probe = [&](torch::Tensor c, torch::Tensor nz) {
    DenoiserInputs in = tf;
    in.x = torch::cat({c, nz}, 2);
    return model->forward(in);
  };
  auto clean2 = clean.clone();
  clean2.narrow(2, 0, 2).normal_();
  auto noisy2 = noisy.clone();
  noisy2.narrow(2, 2, 2).normal_();
  EXPECT_TRUE(torch::allclose(probe(clean2, noisy).narrow(2, F, 2), y.narrow(2, F, 2), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(probe(clean, noisy2).narrow(2, F, 2), y.narrow(2, F, 2), 1e-5, 1e-5));
  // Noisy chunk 1 sees clean chunk 0.
  EXPECT_GT((probe(clean2, noisy).narrow(2, F + 2, 2) - y.narrow(2, F + 2, 2)).abs().max().item<double>(), 1e-4);
  // The masked kernel agrees.
  model->set_causal_kernel(CausalKernel::mask);
  EXPECT_TRUE(torch::allclose(model->forward(tf), y, 1e-5, 1e-5));
}

}  // namespace
}  // namespace vdt
