#include <torch/torch.h>

#include "diffusion/flow_match.h"
#include "model/h3/h3_causal.h"
#include "model/h3/h3_dit.h"
#include "model/kept_ops.h"
#include "model/lora.h"
#include "model/wan_dit.h"
#include "op_counter.h"
#include "test_util.h"
#include "train/tiny_grads_test_util.h"
#include "distributed/activation_checkpoint.h"
#include "generate/model_inputs.h"
#include "tools/synth.h"
#include "train/sft/sft_config.h"
#include "train/sft/sft_trainer.h"
#include "train/causal/causal_config.h"

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define VDT_TEST_CUDA_ALLOC 1
#endif

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

// --- selective checkpointing -------------------------------------------------------------------------------------

using test::Family;

// The gradient of every trainable parameter and of the latents (test::tiny_grads) under a checkpointing mode.
std::map<std::string, torch::Tensor> grads_of(Family family, Checkpointing mode, bool lora, int64_t causal_chunk,
                                              int64_t selective_blocks = -1, double attention_keep = 0) {
  return test::tiny_grads(family, lora, causal_chunk,
                          [&](Denoiser& m) {
                            if (mode == Checkpointing::none) return;
                            CheckpointOptions o;
                            o.selective = mode == Checkpointing::selective, o.selective_blocks = selective_blocks;
                            o.attention_keep = attention_keep;
                            enable_block_checkpointing(m, o);
                          })
      .grads;
}

void expect_same_grads(const std::map<std::string, torch::Tensor>& ref, const std::map<std::string, torch::Tensor>& got,
                       const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  int nonzero = 0;
  for (auto& [k, v] : ref) {
    const double scale = v.abs().max().item<double>();
    nonzero += scale > 0;
    EXPECT_LT((v - got.at(k)).abs().max().item<double>(), 1e-6 + 1e-5 * scale) << k << " " << what;
  }
  EXPECT_GT(nonzero, static_cast<int>(ref.size()) / 2) << what;  // the comparison is not of zeros
}

// Selective checkpointing: full-parameter and LoRA on a frozen base, bidirectional and block-causal, Wan tiny (one text
// per clip, and per-cell text rows) and h3-tiny: every trainable parameter's gradient and the latents' gradient equal
// the plain graph's (and block checkpointing's).
TEST(ActivationCheckpoint, SelectiveGradientsEqualPlainBackward) {
  for (const auto family : {Family::wan, Family::wan_cells, Family::h3})
    for (const bool lora : {false, true})
      for (const int64_t causal : {0, family == Family::h3 ? 2 : 1}) {
        const std::string name = family == Family::wan ? "wan" : family == Family::h3 ? "h3" : "wan cells";
        const std::string what = name + (lora ? " lora" : " full") + (causal ? " causal" : " bidirectional");
        const auto plain = grads_of(family, Checkpointing::none, lora, causal);
        expect_same_grads(plain, grads_of(family, Checkpointing::selective, lora, causal), what + " selective");
        expect_same_grads(plain, grads_of(family, Checkpointing::block, lora, causal), what + " block");
        // the first block keeps, the second recomputes whole (--selective-blocks 1)
        expect_same_grads(plain, grads_of(family, Checkpointing::selective, lora, causal, 1), what + " selective 1");
      }
}

TEST(ActivationCheckpoint, SelectiveBlocksNeedsSelective) {
  CausalConfig c;
  c.data_root = "d", c.out = "o", c.random_init = true, c.memory.selective_blocks = 3;
  test::expect_error([&] { c.validate(); }, {"--selective-blocks 3", "--checkpointing selective"});
  c.memory.checkpointing = "selective";
  c.validate();
  c.memory.selective_blocks = -2;
  test::expect_error([&] { c.validate(); }, {"--selective-blocks -2"});
}

TEST(ActivationCheckpoint, SftSelectiveBlocksNeedsSelective) {
  SftConfig c;
  c.data_root = "d", c.output = "o", c.random_init = true, c.memory.selective_blocks = 1;
  test::expect_error([&] { c.validate(); }, {"--selective-blocks 1", "--checkpointing selective"});
  c.memory.checkpointing = "selective";
  c.validate();
  c.memory.selective_blocks = -3;
  test::expect_error([&] { c.validate(); }, {"--selective-blocks -3"});
}

// test::OpCounter (op_counter.h) counts aten::linear: a block that keeps its GEMM outputs runs each GEMM once
// (forward), a block that recomputes whole runs them twice (forward and backward's recompute).
using test::OpCounter;

// --attn-keep: blocks that recompute whole keep a share of their prefix attention's results from forward to recompute.
// Every gradient equals the plain graph's, and the recompute runs fewer attention forwards: on the CPU each is one
// flash call; Wan tiny's 4 chunks of one frame keep 2 of them at 0.5 (the two with the most keys) and all at 1.
TEST(ActivationCheckpoint, AttentionKeepGradientsEqualPlainAndTheRecomputeSkipsTheKeptAttention) {
  for (const auto family : {Family::wan, Family::h3})
    for (const bool lora : {false, true}) {
      const int64_t causal = family == Family::h3 ? 2 : 1;
      const std::string what = std::string(family == Family::h3 ? "h3" : "wan") + (lora ? " lora" : " full");
      const auto plain = grads_of(family, Checkpointing::none, lora, causal);
      std::map<double, int64_t> forwards;
      for (const double share : {0.0, 0.5, 1.0}) {
        OpCounter counter("aten::_scaled_dot_product_flash_attention_for_cpu");
        const auto got = grads_of(family, Checkpointing::block, lora, causal, -1, share);
        forwards[share] = counter.calls();
        expect_same_grads(plain, got, what + " keep " + std::to_string(share));
      }
      EXPECT_LT(forwards[0.5], forwards[0.0]) << what;
      EXPECT_LT(forwards[1.0], forwards[0.5]) << what;
      if (family == Family::wan) {
        const int64_t layers = preset_config("tiny").num_layers;
        EXPECT_EQ(forwards[0.0] - forwards[0.5], 2 * layers) << what;
        EXPECT_EQ(forwards[0.0] - forwards[1.0], 4 * layers) << what;
      }
    }
}

// --act-offload on a GPU (HostOffload: the copies on a side stream): a LoRA on a frozen tiny Wan of 6 blocks,
// block-causal. Between forward and backward the blocks' residual inputs are off the GPU (nothing else keeps them
// there: the model's block closure and the checkpoint's held call drop theirs), and so are the attention outputs
// --attn-keep 1 keeps (on the GPU without the offload: one block input's worth a block); every factor's gradient equals
// the run without.
TEST(ActivationCheckpoint, OffloadedInputsLeaveTheGpuAndGiveTheSameGradients) {
#ifndef VDT_TEST_CUDA_ALLOC
  GTEST_SKIP() << "needs LibTorch with CUDA";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  auto allocated = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current; };
  const int64_t layers = 6, tokens = 8 * 8 * 8;  // latents [1, 16, 8, 16, 16], 2x2 patches
  auto run = [&](bool offload, double keep, int64_t* held) {
    torch::manual_seed(0);
    auto cfg = preset_config("tiny");
    cfg.num_layers = layers;
    WanDiT m(cfg);
    m->init_random_base(5);
    LoraConfig lc;
    lc.rank = 2, lc.targets = m->lora_targets();
    auto lora = attach_lora(*m, lc, 3);
    {
      torch::NoGradGuard ng;
      for (auto& [n, p] : lora) p.normal_(0, 0.1);
    }
    m->to(torch::kCUDA);
    CheckpointOptions o;
    o.offload_inputs = offload, o.attention_keep = keep;
    enable_block_checkpointing(*m, o);
    DenoiserInputs in;
    in.x = torch::randn({1, 16, 8, 16, 16}).cuda();
    in.t = torch::full({1, 8}, 500.0).cuda();
    in.context = torch::randn({1, 5, 64}).cuda();
    in.attention = AttentionPattern::block_causal(2);
    torch::cuda::synchronize();
    const int64_t before = allocated();
    auto out = m->forward(in);
    torch::cuda::synchronize();
    *held = allocated() - before;
    (out * torch::linspace(-1, 1, out.numel(), out.options()).view_as(out)).sum().backward();
    std::map<std::string, torch::Tensor> g;
    for (auto& [n, p] : lora) g[n] = p.grad().cpu();
    return g;
  };
  int64_t held_on = 0, held_off = 0, held_keep = 0, held_keep_on = 0;
  run(false, 0, &held_off);  // a first run's one-time allocations (cuBLAS workspace and the like) stay allocated
  const auto off = run(false, 0, &held_off), on = run(true, 0, &held_on);
  const auto keep = run(false, 1, &held_keep), keep_on = run(true, 1, &held_keep_on);
  const int64_t x_bytes = tokens * preset_config("tiny").dim * 4;  // one block's residual input, float32
  EXPECT_GE(held_off - held_on, (layers - 1) * x_bytes) << "held after forward: " << held_off << " vs " << held_on;
  EXPECT_GE(held_keep - held_off, (layers - 1) * x_bytes)
      << "kept attention outputs: " << held_keep << " vs " << held_off;
  EXPECT_LT(held_keep_on - held_on, layers * x_bytes / 4)
      << "kept outputs offloaded: " << held_keep_on << " vs " << held_on;
  expect_same_grads(off, on, "offload");
  expect_same_grads(off, keep, "keep 1");
  expect_same_grads(off, keep_on, "keep 1 + offload");
#endif
}

// A runner that keeps a block's run closure (the checkpoint keeps it until backward) does not keep the block's inputs
// alive through it: the closure carries everything else the block needs, not x (--act-offload moved x to the host and
// freed nothing while Wan's and H3's closures copied it). Forward without grad; every block's x is gone afterwards
// while the closures live.
TEST(ActivationCheckpoint, TheBlockClosureHoldsNoInput) {
  for (const bool h3 : {false, true}) {
    torch::manual_seed(0);
    std::shared_ptr<Denoiser> m;
    DenoiserInputs in;
    if (!h3) {
      auto w = WanDiT(preset_config("tiny"));
      w->init_random_base(5);
      m = w.ptr();
      in.x = torch::randn({1, 16, 4, 4, 4}), in.t = torch::tensor({{0.0, 600.0, 600.0, 250.0}});
      in.context = torch::randn({1, 5, 64});
    } else {
      auto h = H3DiT(h3_preset("h3-tiny"));
      h->init_random_base(5);
      m = h.ptr();
      in.x = torch::randn({1, 24, 4, 4, 4}), in.t = torch::rand({1, 4}) * 1000, in.context = torch::randn({1, 6, 48});
      in.extra["picture1"] = torch::randn({1, 24, 1, 2, 4});
      in.extra["audio"] = torch::randn({1, 2, 32, h3_span_audio_steps(4)});
      in.extra["audio.t"] = torch::rand({1, h3_span_audio_steps(4)}) * 1000;
      in.extra["text_tags"] = torch::tensor({{1, 0, 0, 1, 1, 1}});
    }
    in.attention = AttentionPattern::block_causal(h3 ? 2 : 1);
    std::vector<std::function<torch::Tensor(const std::vector<torch::Tensor>&)>> closures;
    std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> inputs;
    m->set_block_runner([&](const BlockCall& call) {
      closures.push_back(call.run);
      inputs.emplace_back(call.inputs[0].getIntrusivePtr());
      return call.run(call.inputs);
    });
    {
      torch::NoGradGuard ng;
      m->forward(in);
    }
    ASSERT_EQ(closures.size(), m->block_modules().size()) << (h3 ? "h3" : "wan");
    for (size_t i = 0; i < inputs.size(); ++i)
      EXPECT_TRUE(inputs[i].expired()) << (h3 ? "h3" : "wan") << " block " << i;
  }
}

TEST(ActivationCheckpoint, AttentionKeepNeedsAShareAndThePrefixAttention) {
  CausalConfig c;
  c.data_root = "d", c.out = "o", c.random_init = true, c.causal_memory.attn_keep = 0.5;
  c.validate();
  c.attention.attn = "mask";
  test::expect_error([&] { c.validate(); }, {"--attn-keep 0.5", "--attn mask", "--attn prefix"});
  c.attention.attn = "prefix", c.causal_memory.attn_keep = 1.5;
  test::expect_error([&] { c.validate(); }, {"--attn-keep 1.5", "[0, 1]"});
  // every block keeps its attention: nothing for the flag to do
  c.causal_memory.attn_keep = 0.5, c.memory.checkpointing = "selective";
  test::expect_error([&] { c.validate(); }, {"--attn-keep 0.5", "--checkpointing selective", "--selective-blocks"});
  c.memory.selective_blocks = 1;
  c.validate();
}

// `vdt train sft --checkpointing selective --selective-blocks N` keeps in the first N blocks only (tiny: 2 blocks):
// counted by the GEMMs that run (each non-keeping block runs its GEMMs again in backward), and the run's losses and
// gradient norms equal the plain backward's.
TEST(ActivationCheckpoint, SftTrainerHonoursSelectiveBlocks) {
  test::TempDir dir;
  SynthConfig sc;
  sc.out = dir.file("data"), sc.train_runs = 1, sc.train_clips_per_run = 2, sc.n_drop = 0;
  const auto res = synth_root(sc).res;
  auto run = [&](const std::string& mode, int64_t blocks) {
    SftConfig c;
    c.data_root = dir.file("data"), c.output = dir.file(mode + std::to_string(blocks)), c.res = res;
    c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
    c.gradient_checkpointing = mode != "none", c.memory.checkpointing = mode == "none" ? "block" : mode;
    c.memory.selective_blocks = blocks;
    c.max_steps = 2, c.batch_size = 1, c.grad_accum = 1, c.lr = 1e-3, c.cond_lr = 1e-3, c.warmup_steps = 0;
    c.val_every = 0, c.save_every = 0, c.save_state = false, c.final_export = false, c.num_workers = 1;
    OpCounter counter("aten::linear");
    const auto s = train_sft(c);
    return std::make_pair(s, counter.calls());
  };
  const auto [plain, n_plain] = run("none", -1);
  const auto [all, n_all] = run("selective", -1);
  const auto [one, n_one] = run("selective", 1);
  const auto [zero, n_zero] = run("selective", 0);
  const auto [block, n_block] = run("block", -1);
  EXPECT_EQ(n_all, n_plain) << "every block keeps: no GEMM runs twice";
  EXPECT_GT(n_one, n_all) << "block 1 recomputes its GEMMs";
  EXPECT_EQ(n_one - n_all, n_zero - n_one) << "blocks 0 and 1 recompute the same GEMMs";
  EXPECT_EQ(n_zero, n_block) << "no block keeps: block checkpointing";
  for (const auto* s : {&all, &one, &zero, &block}) {
    ASSERT_EQ(s->losses.size(), plain.losses.size());
    for (size_t i = 0; i < plain.losses.size(); ++i) {
      EXPECT_NEAR(s->losses[i], plain.losses[i], 1e-6 * std::abs(plain.losses[i]) + 1e-7) << "step " << i;
      EXPECT_NEAR(s->grad_norms[i], plain.grad_norms[i], 1e-5 * plain.grad_norms[i] + 1e-7) << "step " << i;
    }
  }
}

// Without a policy installed, the model's marked calls are the plain ops.
TEST(ActivationCheckpoint, KeptOpsWithoutAPolicyAreThePlainOps) {
  auto x = torch::randn({2, 3, 8}), w = torch::randn({5, 8}), b = torch::randn({5});
  EXPECT_TRUE(torch::equal(kept_linear(x, w, b), torch::linear(x, w, b)));
  EXPECT_TRUE(torch::equal(kept_linear(x, w, b, GemmRole::base, InputAct::gelu_tanh),
                           torch::linear(torch::gelu(x, "tanh"), w, b)));
  int calls = 0;
  auto y = kept_attention({x}, [&](const std::vector<torch::Tensor>& t) {
    ++calls;
    return t[0] * 2;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(torch::equal(y, x * 2));
}

TEST(ActivationCheckpoint, CheckpointingFlagsNameTheChoices) {
  EXPECT_EQ(parse_checkpointing("selective", "--checkpointing"), Checkpointing::selective);
  test::expect_error([] { parse_checkpointing("layer", "--checkpointing"); },
                     {"--checkpointing", "layer", "none", "block", "selective"});
  SftConfig sft;
  sft.data_root = "d", sft.output = "o", sft.random_init = true;
  sft.memory.checkpointing = "selective";
  EXPECT_EQ(sft.checkpointing_mode(), Checkpointing::selective);
  sft.gradient_checkpointing = false;
  test::expect_error([&] { sft.validate(); }, {"--checkpointing selective", "--no-gradient_checkpointing"});
  sft.memory.checkpointing = "block";
  EXPECT_EQ(sft.checkpointing_mode(), Checkpointing::none);
  CausalConfig causal;
  causal.memory.checkpointing = "selective";
  EXPECT_EQ(causal.checkpointing_mode(), Checkpointing::selective);
  causal.memory.checkpointing = "none";
  test::expect_error([&] { causal.checkpointing_mode(); }, {"--checkpointing", "'none'", "block, selective"});
}

// model_inputs finds the distinct timesteps of a host t (where the objectives build it) without touching a device.
TEST(ModelInputs, HostTimestepsComeWithTheirDistinctRows) {
  WanDiT m(preset_config("tiny"));
  auto t = torch::tensor({{0.0, 500.0, 500.0}});
  auto in = model_inputs(*m, torch::zeros({1, 16, 3, 4, 4}), t, torch::zeros({1, 5, 64}), {});
  ASSERT_TRUE(in.t_rows.defined());
  EXPECT_TRUE(torch::equal(in.t_rows, torch::tensor({0.0f, 500.0f})));
  EXPECT_TRUE(torch::equal(in.t_index, torch::tensor({{0, 1, 1}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(in.t, t));
}

}  // namespace
}  // namespace vdt
