#include <torch/torch.h>

#include "diffusion/flow_match.h"
#include "model/lora.h"
#include "model/wan_dit.h"
#include "test_util.h"
#include "train/loop/activation_checkpoint.h"

namespace vdt {
namespace {

// Gradients of every parameter with per-block checkpointing equal those of the plain graph, bidirectional and
// block-causal (chunks of one latent frame).
TEST(ActivationCheckpoint, GradientsEqualPlainBackward) {
  auto run = [](bool ckpt, int64_t causal) {
    torch::manual_seed(0);
    WanDiT m(preset_config("tiny"));
    m->init_weights(5);
    {
      torch::NoGradGuard ng;
      m->head->head->weight.normal_(0, 0.05);
    }
    if (ckpt) enable_block_checkpointing(*m);
    auto x = torch::randn({1, 16, 3, 4, 6}), ctx = torch::randn({1, 5, 64}), target = torch::randn({1, 16, 3, 4, 6});
    auto t = torch::tensor({{0.0, 600.0, 600.0}});
    DenoiserInputs in{x, t, ctx};
    in.attention = AttentionPattern::block_causal(causal);
    flow_mse(m->forward(in), target, true).backward();
    std::map<std::string, torch::Tensor> g;
    for (auto& kv : m->named_parameters()) g[kv.key()] = kv.value().grad().clone();
    return g;
  };
  for (int64_t causal : {0, 1}) {
    auto plain = run(false, causal), ckpt = run(true, causal);
    ASSERT_EQ(plain.size(), ckpt.size());
    for (auto& [k, v] : plain) {
      EXPECT_LT((v - ckpt[k]).abs().max().item<double>(), 1e-6 + 1e-5 * v.abs().max().item<double>())
          << k << " causal " << causal;
      EXPECT_GT(v.abs().max().item<double>(), 0.0) << k;
    }
  }
}

// A LoRA on a frozen base under checkpointing: block 0's inputs need no gradient (frozen embeddings), yet every
// factor gets the gradient of the plain graph; the hooks run around every forward and every recompute.
TEST(ActivationCheckpoint, LoraOnAFrozenBaseGetsEveryGradientAndHooksWrapEachRun) {
  auto run = [](bool ckpt, int* calls) {
    torch::manual_seed(0);
    WanDiT m(preset_config("tiny"));
    m->init_weights(5);
    {
      torch::NoGradGuard ng;
      m->head->head->weight.normal_(0, 0.05);
    }
    LoraConfig lc;
    lc.rank = 2;
    auto lora = attach_lora(*m, lc, 3);
    {
      torch::NoGradGuard ng;
      for (auto& [n, p] : lora) p.normal_(0, 0.1);  // B non-zero too, so A gets a gradient
    }
    if (ckpt) {
      CheckpointOptions o;
      o.offload_inputs = true;  // a no-op on CPU tensors
      o.before = [calls](torch::nn::Module&) { ++calls[0]; };
      o.after = [calls](torch::nn::Module&) { ++calls[1]; };
      enable_block_checkpointing(*m, o);
    }
    auto x = torch::randn({1, 16, 2, 4, 4}), ctx = torch::randn({1, 5, 64}), target = torch::randn({1, 16, 2, 4, 4});
    DenoiserInputs in{x, torch::tensor({{300.0, 700.0}}), ctx};
    in.attention = AttentionPattern::block_causal(1);
    flow_mse(m->forward(in), target, false).backward();
    std::map<std::string, torch::Tensor> g;
    for (auto& [n, p] : lora) g[n] = p.grad().clone();
    return g;
  };
  int calls[2] = {0, 0};
  auto plain = run(false, calls), ckpt = run(true, calls);
  const int64_t layers = preset_config("tiny").num_layers;
  EXPECT_EQ(calls[0], 2 * layers);  // forward + recompute per block
  EXPECT_EQ(calls[1], 2 * layers);
  for (auto& [k, v] : plain) {
    ASSERT_TRUE(ckpt[k].defined()) << k;
    EXPECT_GT(v.abs().max().item<double>(), 0.0) << k;
    EXPECT_LT((v - ckpt[k]).abs().max().item<double>(), 1e-6 + 1e-5 * v.abs().max().item<double>()) << k;
  }
}

}  // namespace
}  // namespace vdt
