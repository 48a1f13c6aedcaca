// ranged_attention (one autograd node, per-block fused SDPA forward and backward) against the per-block autograd
// reference, forward and every input gradient.
#include <torch/torch.h>

#include "model/h3/h3_attention.h"
#include "model/ranged_attention.h"
#include "test_util.h"

namespace vdt {
namespace ranged_attention_test {  // named: unity batches compile several test files as one unit

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm() / b.norm().clamp_min(1e-30)).item<double>();
}

struct Grads {
  torch::Tensor out, dq, dk, dv;
};

// q/k/v [S, N, Dh] leaves; the loss weights every output element differently so each gradient is exercised.
Grads run(const H3AttentionLayout& layout, bool reference, torch::ScalarType dtype) {
  torch::manual_seed(11);
  const int64_t S = 37, N = 3, Dh = 16;
  auto q = torch::randn({S, N, Dh}).to(dtype).requires_grad_(), k = torch::randn({S, N, Dh}).to(dtype).requires_grad_();
  auto v = torch::randn({S, N, Dh}).to(dtype).requires_grad_();
  auto w = torch::randn({S, N, Dh}).to(dtype);
  auto out = layout_attention(q, k, v, layout, AttentionKernel::sdpa, reference);
  (out * w).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

H3AttentionLayout block_causal_layout() {
  // prefix rows [0, 7); chunks [7, 17), [17, 27), [27, 37): chunk c sees the prefix and chunks <= c; the prefix sees
  // itself; the last chunk also skips chunk 1 (two key ranges, the gathered path)
  H3AttentionLayout l;
  l.blocks = {{0, 7, {{0, 7}}}, {7, 17, {{0, 17}}}, {17, 27, {{0, 27}}}, {27, 37, {{0, 17}, {27, 37}}}};
  return l;
}

TEST(RangedAttention, EqualsPerBlockAutogradForwardAndBackward) {
  auto q = torch::randn({1, 2, 5, 8});
  ASSERT_TRUE(ranged_attention_supported(q, q, q)) << "the CPU's fused SDPA (flash) backend should take fp32";
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
    auto fast = run(block_causal_layout(), false, dtype), ref = run(block_causal_layout(), true, dtype);
    EXPECT_LT(rel(fast.out.to(torch::kFloat32), ref.out.to(torch::kFloat32)), tol) << dtype;
    EXPECT_LT(rel(fast.dq.to(torch::kFloat32), ref.dq.to(torch::kFloat32)), tol) << dtype;
    EXPECT_LT(rel(fast.dk.to(torch::kFloat32), ref.dk.to(torch::kFloat32)), tol) << dtype;
    EXPECT_LT(rel(fast.dv.to(torch::kFloat32), ref.dv.to(torch::kFloat32)), tol) << dtype;
  }
}

// The key gradients summed over ranges that overlap in every way: a later block's range that starts before, spans and
// ends after the rows an earlier one saw, two ranges in one block, and rows nobody sees, against the per-block
// autograd reference.
TEST(RangedAttention, KeyGradientsSumOverlappingRangesInAnyOrder) {
  H3AttentionLayout l;
  l.blocks = {{0, 10, {{10, 15}}}, {10, 20, {{0, 20}}}, {20, 37, {{2, 5}, {12, 25}}}};  // keys 25..37 seen by nobody
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
    auto fast = run(l, false, dtype), ref = run(l, true, dtype);
    EXPECT_LT(rel(fast.dk.to(torch::kFloat32), ref.dk.to(torch::kFloat32)), tol) << dtype;
    EXPECT_LT(rel(fast.dv.to(torch::kFloat32), ref.dv.to(torch::kFloat32)), tol) << dtype;
    EXPECT_EQ(fast.dk.narrow(0, 25, 12).abs().max().item<float>(), 0.f) << dtype;
    EXPECT_EQ(fast.dv.narrow(0, 25, 12).abs().max().item<float>(), 0.f) << dtype;
  }
}

// A block whose one range is all the keys starts the key gradients' sums (its own gradient, no zero-filled start):
// the prefix pattern (the last chunk sees all) and a middle block seeing all, against the per-block reference.
TEST(RangedAttention, ABlockSeeingAllKeysStartsTheirGradients) {
  H3AttentionLayout prefix, middle;
  prefix.blocks = {{0, 12, {{0, 12}}}, {12, 25, {{0, 25}}}, {25, 37, {{0, 37}}}};
  middle.blocks = {{0, 12, {{0, 12}}}, {12, 25, {{0, 37}}}, {25, 37, {{0, 25}}}};
  for (const auto& l : {prefix, middle})
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const double tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
      auto fast = run(l, false, dtype), ref = run(l, true, dtype);
      EXPECT_LT(rel(fast.dq.to(torch::kFloat32), ref.dq.to(torch::kFloat32)), tol) << dtype;
      EXPECT_LT(rel(fast.dk.to(torch::kFloat32), ref.dk.to(torch::kFloat32)), tol) << dtype;
      EXPECT_LT(rel(fast.dv.to(torch::kFloat32), ref.dv.to(torch::kFloat32)), tol) << dtype;
    }
}

TEST(RangedAttention, KeysNoBlockSeesGetNoGradientAndBadBlocksAreRefused) {
  H3AttentionLayout l;
  l.blocks = {{0, 20, {{0, 10}}}, {20, 37, {{0, 10}}}};  // keys 10..37 seen by nobody
  auto g = run(l, false, torch::kFloat32);
  EXPECT_EQ(g.dk.narrow(0, 10, 27).abs().max().item<float>(), 0.f);
  EXPECT_EQ(g.dv.narrow(0, 10, 27).abs().max().item<float>(), 0.f);
  EXPECT_GT(g.dk.narrow(0, 0, 10).abs().max().item<float>(), 0.f);
  auto q = torch::randn({1, 2, 10, 8});
  test::expect_error([&] { ranged_attention(q, q, q, {{0, 4, {{0, 4}}}, {5, 10, {{0, 10}}}}); }, {"in order"});
  test::expect_error([&] { ranged_attention(q, q, q, {{0, 10, {{0, 11}}}}); }, {"key range 0..11"});
  test::expect_error([&] { ranged_attention(q, q, q, {{0, 6, {{0, 6}}}}); }, {"end at row 6"});
}

// --attn-keep's choice: the blocks with the most keys first while their rows fit in the share (a block that does not
// fit is passed over for a smaller one).
TEST(RangedAttention, KeepTakesTheBlocksWithTheMostKeys) {
  std::vector<QueryBlock> prefix;  // six chunks of 10 rows, chunk i sees chunks 0..i
  for (int64_t i = 0; i < 6; ++i) prefix.push_back({10 * i, 10 * i + 10, {{0, 10 * i + 10}}});
  EXPECT_EQ(blocks_to_keep(prefix, 0.5), (std::vector<size_t>{3, 4, 5}));
  EXPECT_EQ(blocks_to_keep(prefix, 0.2), (std::vector<size_t>{5}));
  EXPECT_EQ(blocks_to_keep(prefix, 1.0), (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(blocks_to_keep(prefix, 0.17), (std::vector<size_t>{5}));
  EXPECT_TRUE(blocks_to_keep(prefix, 0.16).empty());
  const std::vector<QueryBlock> uneven = {{0, 5, {{0, 5}}}, {5, 30, {{0, 30}}}, {30, 40, {{0, 40}}}};
  EXPECT_EQ(blocks_to_keep(uneven, 0.4), (std::vector<size_t>{0, 2}));  // 10 + 5 rows; the 25-row block does not fit
  test::expect_error([] { RangedAttentionKeep k(0.0); }, {"--attn-keep", "(0, 1]"});
}

// A kept block's forward is not run again: replayed on other inputs, the kept blocks' rows are the recorded ones and
// the others are computed afresh; replayed on the same inputs, output and gradients are the plain call's, bit for bit.
TEST(RangedAttention, AKeptBlockIsNotRunAgainAndItsGradientsAreThePlainOnes) {
  torch::manual_seed(3);
  const std::vector<QueryBlock> blocks = {{0, 8, {{0, 8}}}, {8, 16, {{0, 16}}}, {16, 24, {{0, 24}}}};
  auto q = torch::randn({1, 2, 24, 8}), k = torch::randn({1, 2, 24, 8}), v = torch::randn({1, 2, 24, 8});
  auto w = torch::randn({1, 2, 24, 8});
  auto grads = [&](const torch::Tensor& qq, RangedAttentionKeep* keep, const std::vector<QueryBlock>& layout) {
    auto ql = qq.clone().requires_grad_(), kl = k.clone().requires_grad_(), vl = v.clone().requires_grad_();
    RangedAttentionKeepScope scope(keep);
    auto out = ranged_attention(ql, kl, vl, layout);
    (out * w).sum().backward();
    return std::vector<torch::Tensor>{out.detach(), ql.grad(), kl.grad(), vl.grad()};
  };
  auto record = [&](RangedAttentionKeep& keep) {
    torch::NoGradGuard ng;  // a checkpointed block's forward
    RangedAttentionKeepScope scope(&keep);
    auto out = ranged_attention(q, k, v, blocks);
    keep.replay();
    return out;
  };
  const auto plain = grads(q, nullptr, blocks);
  RangedAttentionKeep same(0.5);  // 12 of 24 rows: block 2 (8 rows); block 1 (8 more) would make 16
  EXPECT_TRUE(torch::equal(record(same), plain[0]));
  const auto replayed = grads(q, &same, blocks);
  same.check_done();
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(replayed[i], plain[i])) << i;

  RangedAttentionKeep other(0.5);
  record(other);
  const auto q2 = q + 1;
  const auto fresh = grads(q2, nullptr, blocks)[0], got = grads(q2, &other, blocks)[0];
  EXPECT_TRUE(torch::equal(got.narrow(2, 16, 8), plain[0].narrow(2, 16, 8))) << "the kept block: the recorded rows";
  EXPECT_TRUE(torch::equal(got.narrow(2, 0, 16), fresh.narrow(2, 0, 16))) << "the others: computed on q2";
  EXPECT_FALSE(torch::equal(fresh.narrow(2, 16, 8), plain[0].narrow(2, 16, 8)));

  RangedAttentionKeep wrong(0.5);
  record(wrong);
  test::expect_error([&] { grads(q, &wrong, {{0, 12, {{0, 12}}}, {12, 24, {{0, 24}}}}); }, {"--attn-keep", "same ops"});
  RangedAttentionKeep short_replay(0.5);
  record(short_replay);
  test::expect_error([&] { short_replay.check_done(); }, {"--attn-keep", "made 0 ranged attention calls", "forward 1"});
}

// A stash (`--act-offload on` passes the host's) holds each kept output from the forward to the replay: the forward
// hands it exactly the kept blocks' outputs, the replay takes each back once, and output and gradients stay the plain
// call's, bit for bit (here the stash holds copies and hands back the copies).
TEST(RangedAttention, AStashHoldsTheKeptOutputsUntilTheReplay) {
  torch::manual_seed(4);
  const std::vector<QueryBlock> blocks = {{0, 8, {{0, 8}}}, {8, 16, {{0, 16}}}, {16, 24, {{0, 24}}}};
  auto q = torch::randn({1, 2, 24, 8}), k = torch::randn({1, 2, 24, 8}), v = torch::randn({1, 2, 24, 8});
  auto w = torch::randn({1, 2, 24, 8});
  std::vector<std::vector<int64_t>> put;  // the shapes the stash took
  int64_t taken = 0;
  RangedAttentionKeep keep(0.7, [&](const torch::Tensor& out) -> std::function<torch::Tensor()> {
    put.push_back(out.sizes().vec());
    auto copy = out.clone();
    return [copy, &taken] { return ++taken, copy; };
  });
  auto grads = [&](RangedAttentionKeep* kp) {
    auto ql = q.clone().requires_grad_(), kl = k.clone().requires_grad_(), vl = v.clone().requires_grad_();
    RangedAttentionKeepScope scope(kp);
    auto out = ranged_attention(ql, kl, vl, blocks);
    (out * w).sum().backward();
    return std::vector<torch::Tensor>{out.detach(), ql.grad(), kl.grad(), vl.grad()};
  };
  const auto plain = grads(nullptr);
  {
    torch::NoGradGuard ng;
    RangedAttentionKeepScope scope(&keep);
    ranged_attention(q, k, v, blocks);
  }
  ASSERT_EQ(put.size(), 2u) << "0.7 of 24 rows: blocks 2 and 1";
  for (const auto& sizes : put) EXPECT_EQ(sizes, (std::vector<int64_t>{1, 2, 8, 8}));
  EXPECT_EQ(taken, 0);
  keep.replay();
  const auto replayed = grads(&keep);
  keep.check_done();
  EXPECT_EQ(taken, 2);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(replayed[i], plain[i])) << i;
}

}  // namespace ranged_attention_test
}  // namespace vdt
