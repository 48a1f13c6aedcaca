#include <torch/torch.h>

#include "model/wan_dit.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(SemCond, ZeroInitialisedSixTensorsAndUnknownIsAllZeros) {
  SemCond sc(SemCondConfig{.vocab_size = 20, .scale = 2, .hidden = 32}, 128, std::array<int64_t, 3>{1, 2, 2});
  EXPECT_EQ(sc->parameters().size(), 6u);
  EXPECT_TRUE(sc->is_zero_output());
  auto ids = torch::randint(0, 20, {2, 3, 8, 8}, torch::kByte);
  EXPECT_EQ(sc->forward(ids).abs().max().item<double>(), 0.0);
  EXPECT_EQ(sc->forward(ids).sizes(), (std::vector<int64_t>{2, 3 * 2 * 2, 128}));
  // With a non-zero proj_out, an all-UNKNOWN map gives the bias path only: same output for every token.
  torch::NoGradGuard ng;
  sc->proj_out->weight.normal_();
  auto unknown = torch::full({1, 3, 8, 8}, 255, torch::kByte);
  auto y = sc->forward(unknown);
  EXPECT_LT((y - y[0][0]).abs().max().item<double>(), 1e-6);
  // Different ids at one location change only the token that covers it.
  auto a = torch::zeros({1, 3, 8, 8}, torch::kByte), b = a.clone();
  b[0][1][0][0] = 5;
  auto d = (sc->forward(a) - sc->forward(b)).abs().sum(-1)[0];  // [L]
  EXPECT_GT(d[4].item<double>(), 0.0);                          // frame 1, token (0, 0)
  EXPECT_EQ((d > 0).sum().item<int64_t>(), 1);
}

TEST(SemCond, OutOfVocabularyIdsAreRejected) {
  SemCond sc(SemCondConfig{.vocab_size = 10, .scale = 2, .hidden = 16}, 64, std::array<int64_t, 3>{1, 2, 2});
  test::expect_error([&] { sc->forward(torch::full({1, 1, 4, 4}, 12, torch::kByte)); }, {"outside the vocabulary"});
  test::expect_error([] { sem_vocab_size("words"); }, {"--vocab", "words"});
}

// At installation the adapter changes nothing: same output as the plain model, sem_rms exactly 0.
TEST(SemCond, InstalledAdapterStartsAsTheBaseModel) {
  torch::manual_seed(0);
  WanDiT m(preset_config("tiny"));
  auto x = torch::randn({1, 16, 3, 4, 6}), ctx = torch::randn({1, 5, 64});
  auto t = torch::tensor({{0.0, 500.0, 500.0}});
  auto base = m->forward({x, t, ctx});
  m->install_sem_cond({.vocab_size = 20, .scale = 2, .hidden = 32});
  DenoiserAux aux;
  DenoiserInputs in{x, t, ctx};
  in.sem_ids = torch::randint(0, 20, {1, 3, 8, 12}, torch::kByte);
  auto with = m->forward(in, &aux);
  EXPECT_TRUE(torch::equal(base, with));
  EXPECT_EQ(aux.sem_rms.item<double>(), 0.0);
  EXPECT_GT(aux.x_rms.item<double>(), 0.0);
  EXPECT_EQ(m->parameters().size(), 15u + 2 * 27 + 6);  // tiny: 2 layers, plus the six adapter tensors
  test::expect_error([&] { m->forward({x, t, ctx}); }, {"no sem_ids"});
  in.sem_ids = torch::zeros({1, 3, 4, 6}, torch::kByte);  // wrong scale
  test::expect_error([&] { m->forward(in); }, {"sem_scale"});
}

}  // namespace
}  // namespace vdt
