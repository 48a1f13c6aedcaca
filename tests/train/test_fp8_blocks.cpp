// FP8 block linears applied from outside (distributed/fp8_blocks.h), with the emulated backend (the reference numerics,
// any device): which blocks take FP8, the flag and device errors, gradients that agree under every checkpointing mode
// (the selective replay's backward is the FP8 one too) for Wan and H3, full-parameter and LoRA on a frozen base, and
// the trainers running with `--fp8 emulate` close to their bf16-linear curves.
#include <torch/torch.h>

#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "model/h3/h3_causal.h"
#include "model/h3/h3_dit.h"
#include "model/lora.h"
#include "model/wan_dit.h"
#include "test_util.h"
#include "train/tiny_grads_test_util.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"
#include "train/causal_test_util.h"
#include "distributed/activation_checkpoint.h"
#include "distributed/fp8_blocks.h"
#include "train/sft/sft_trainer.h"
#include "train/sft_test_util.h"

namespace vdt {
namespace fp8_blocks_test {

TEST(Fp8Blocks, AllBlocksButTheFirstAndLast) {
  EXPECT_EQ(fp8_block_indices(30), [] {
    std::vector<int64_t> v;
    for (int64_t i = 1; i <= 28; ++i) v.push_back(i);
    return v;
  }());
  EXPECT_EQ(fp8_block_indices(3), std::vector<int64_t>{1});
  EXPECT_EQ(fp8_block_indices(2), (std::vector<int64_t>{0, 1}));  // no middle: all (the tiny presets)
  EXPECT_EQ(fp8_block_indices(1), std::vector<int64_t>{0});
}

TEST(Fp8Blocks, FlagAndDeviceErrorsNameTheFlag) {
  EXPECT_EQ(parse_fp8("emulate", "--fp8"), Fp8Mode::emulate);
  EXPECT_EQ(parse_fp8("fast", "--fp8"), Fp8Mode::fast);
  test::expect_error([] { parse_fp8("e4m3", "--fp8"); }, {"--fp8", "'e4m3'", "off", "on", "fast", "emulate"});
  // on needs a GPU of compute capability 8.9+; the error says what to do instead
  test::expect_error([] { check_fp8_device(Fp8Mode::on, torch::Device(torch::kCPU), "--fp8"); },
                     {"--fp8 on", "cpu", "8.9", "--fp8 off", "--fp8 emulate"});
  test::expect_error([] { check_fp8_device(Fp8Mode::fast, torch::Device(torch::kCPU), "--fp8"); },
                     {"--fp8 fast", "cpu", "--fp8 off"});
  check_fp8_device(Fp8Mode::emulate, torch::Device(torch::kCPU), "--fp8");
  check_fp8_device(Fp8Mode::off, torch::Device(torch::kCPU), "--fp8");
  SftConfig sft;
  sft.data_root = "d", sft.output = "o", sft.random_init = true;
  EXPECT_EQ(sft.compute.fp8_mode(), Fp8Mode::off);  // off by default
  sft.compute.fp8 = "yes";
  test::expect_error([&] { sft.validate(); }, {"--fp8", "'yes'"});
  sft.compute.fp8 = "emulate";
  sft.validate();
  EXPECT_EQ(nlohmann::json::parse(sft.to_json())["fp8"], "emulate");  // recorded in config.json's args
  CausalConfig causal;
  causal.data_root = "d", causal.out = "o", causal.random_init = true, causal.compute.fp8 = "on ";
  test::expect_error([&] { causal.validate(); }, {"--fp8", "'on '"});
  causal.compute.fp8 = "on";
  causal.validate();
  EXPECT_EQ(nlohmann::json::parse(causal.to_json())["fp8"], "on");  // args.json
}

using test::Family;

struct Run {
  std::map<std::string, torch::Tensor> grads;  // every trainable parameter's and the latents'
  torch::Tensor out;
  std::string described;
  int64_t frozen = 0, released = 0;  // the blocks' frozen 2-D weights, and those whose data went (held as FP8)
};

// test::tiny_grads under the checkpointing mode and FP8 on the given blocks (nullopt: off); hold: the frozen weights
// held as FP8.
Run run(Family family, Checkpointing mode, bool lora, std::optional<std::vector<int64_t>> fp8, bool hold = false) {
  Run r;
  std::vector<torch::Tensor> frozen;
  auto g = test::tiny_grads(family, lora, 0, [&](Denoiser& m) {
    if (mode != Checkpointing::none) {
      CheckpointOptions o;
      o.selective = mode == Checkpointing::selective;
      enable_block_checkpointing(m, o);
    }
    if (fp8) r.described = enable_fp8_linears(m, Fp8Mode::emulate, *fp8, hold);
    for (auto* block : m.block_modules())
      for (const auto& p : block->parameters())
        if (!p.requires_grad() && p.dim() == 2) frozen.push_back(p);
  });
  r.grads = std::move(g.grads), r.out = g.out;
  r.frozen = static_cast<int64_t>(frozen.size());
  for (const auto& p : frozen) r.released += p.stride(0) == 0 && p.stride(1) == 0;
  return r;
}

double max_rel(const std::map<std::string, torch::Tensor>& ref, const std::map<std::string, torch::Tensor>& got) {
  double worst = 0;
  for (auto& [k, v] : ref) {
    const double scale = v.abs().max().item<double>();
    if (scale > 0) worst = std::max(worst, (v - got.at(k)).abs().max().item<double>() / scale);
  }
  return worst;
}

// Every checkpointing mode gives the FP8 gradients of the plain graph (selective replays the kept FP8 output and runs
// the FP8 backward); they differ from the bf16-linear gradients by FP8's error; no block selected is FP8 off exactly.
TEST(Fp8Blocks, EmulatedGradientsAgreeUnderEveryCheckpointingMode) {
  for (const auto family : {Family::wan, Family::h3})
    for (const bool lora : {false, true}) {
      const std::string what = std::string(family == Family::wan ? "wan" : "h3") + (lora ? " lora" : " full");
      const std::vector<int64_t> both = {0, 1};
      const auto plain = run(family, Checkpointing::none, lora, both);
      EXPECT_NE(plain.described.find("blocks 0-1 of 2"), std::string::npos) << plain.described;
      for (const auto mode : {Checkpointing::block, Checkpointing::selective}) {
        const auto r = run(family, mode, lora, both);
        EXPECT_LT(max_rel(plain.grads, r.grads), 1e-5)
            << what << (mode == Checkpointing::block ? " block" : " selective");
        EXPECT_TRUE(torch::allclose(plain.out, r.out, 1e-6, 1e-6)) << what;
      }
      const auto off = run(family, Checkpointing::block, lora, std::nullopt);
      const double d = max_rel(off.grads, plain.grads);
      EXPECT_GT(d, 1e-4) << what << ": FP8 changed nothing";
      EXPECT_LT(d, 0.25) << what;
      const double dout = ((off.out - plain.out).abs().max() / off.out.abs().max()).item<double>();
      EXPECT_GT(dout, 1e-5) << what;
      EXPECT_LT(dout, 0.1) << what;
      // only the selected blocks: none selected is FP8 off
      const auto none = run(family, Checkpointing::selective, lora, std::vector<int64_t>{});
      EXPECT_LT(max_rel(off.grads, none.grads), 1e-5) << what;
      // one block: between the two
      const auto one = run(family, Checkpointing::none, lora, std::vector<int64_t>{1});
      EXPECT_GT(max_rel(off.grads, one.grads), 1e-5) << what;
      EXPECT_GT(max_rel(plain.grads, one.grads), 1e-5) << what;
    }
}

// A LoRA's frozen base held as FP8 (the causal trainer's default with FP8 on one rank's whole base) gives the same
// output and gradients, bit for bit, as re-quantizing it each call, under every checkpointing mode (block recompute
// and the selective replay find the held copies too), and releases the data of exactly the weights the FP8 GEMMs read
// (Wan: self- and cross-attention q, k, v, o and the FFN's two, 10 a block, all its frozen 2-D weights; H3: qkv, out
// and the MLP's two, 4 of its 5 a block: the one no FP8 GEMM reads keeps its data).
TEST(Fp8Blocks, HeldFrozenBaseGivesTheSameGradientsAndReleasesItsData) {
  for (const auto family : {Family::wan, Family::h3})
    for (const auto mode : {Checkpointing::none, Checkpointing::block, Checkpointing::selective}) {
      const std::string what =
          std::string(family == Family::wan ? "wan" : "h3") + " mode " + std::to_string(static_cast<int>(mode));
      const std::vector<int64_t> both = {0, 1};
      const auto plain = run(family, mode, /*lora=*/true, both, /*hold=*/false);
      const auto held = run(family, mode, /*lora=*/true, both, /*hold=*/true);
      EXPECT_TRUE(torch::equal(plain.out, held.out)) << what;
      for (const auto& [k, v] : plain.grads) EXPECT_TRUE(torch::equal(v, held.grads.at(k))) << what << " " << k;
      EXPECT_EQ(plain.released, 0) << what;
      EXPECT_EQ(held.released, family == Family::wan ? 20 : 8) << what << " of " << held.frozen;
      EXPECT_LT(held.released, held.frozen + (family == Family::wan ? 1 : 0)) << what;  // H3's others keep theirs
      EXPECT_NE(held.described.find("held as FP8"), std::string::npos) << held.described;
      // only the selected blocks' weights
      const auto one = run(family, mode, true, std::vector<int64_t>{1}, true);
      EXPECT_EQ(one.released * 2, held.released) << what;
    }
  // full-parameter training holds nothing: its block weights train
  const auto full = run(Family::wan, Checkpointing::block, /*lora=*/false, std::vector<int64_t>{0, 1}, true);
  EXPECT_EQ(full.frozen, 0);
  EXPECT_EQ(full.described.find("held as FP8"), std::string::npos) << full.described;
}

// `--fp8 emulate` through the trainers on the tiny preset (fp32, CPU): finite losses that stay within FP8's error of
// the same run's bf16-linear losses (the GPU accuracy gate of 2 % on the running mean, in small), and the flag in the
// recorded config. The golden curves (fp8 off) are checked by GoldenCurves.
class Fp8Train : public test::SuiteDirTest<Fp8Train> {
 public:
  static void write_suite_files(const test::TempDir& dir) {
    res_ = test::write_sft_root(dir.file("sft_data"), /*train_runs=*/2, /*clips_per_run=*/4, /*n_drop=*/2);
    synth_root(test::wan_causal_root(dir.file("causal_data")));
  }

 protected:
  static inline std::string res_;
};

void expect_close_curves(const std::vector<double>& off, const std::vector<double>& fp8, const std::string& what) {
  ASSERT_EQ(off.size(), fp8.size()) << what;
  double moved = 0, mean_off = 0, mean_fp8 = 0;
  for (size_t i = 0; i < off.size(); ++i) {
    ASSERT_TRUE(std::isfinite(fp8[i])) << what << " step " << i + 1;
    EXPECT_LT(std::abs(fp8[i] - off[i]), 0.05 * std::abs(off[i])) << what << " step " << i + 1;
    moved = std::max(moved, std::abs(fp8[i] - off[i]));
    mean_off += off[i], mean_fp8 += fp8[i];
  }
  EXPECT_GT(moved, 0) << what << ": FP8 changed nothing";
  EXPECT_LT(std::abs(mean_fp8 - mean_off), 0.02 * std::abs(mean_off)) << what;
}

TEST_F(Fp8Train, SftWithEmulatedFp8TracksTheBf16Curve) {
  auto config = [](const std::string& fp8, const std::string& ckpt) {
    SftConfig c;
    c.data_root = dir_->file("sft_data"), c.output = dir_->file("sft_" + fp8 + "_" + ckpt), c.res = res_;
    c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
    c.memory.checkpointing = ckpt;
    c.max_steps = 8, c.batch_size = 2, c.grad_accum = 1, c.lr = 5e-4, c.cond_lr = 2e-3, c.warmup_steps = 2;
    c.val_every = 0, c.save_every = 0, c.save_state = false, c.num_workers = 1, c.compute.fp8 = fp8;
    return c;
  };
  const auto off = train_sft(config("off", "block"));
  const auto fp8 = train_sft(config("emulate", "selective"));
  expect_close_curves(off.losses, fp8.losses, "sft");
  std::ifstream f(dir_->file("sft_emulate_selective") + "/config.json");
  EXPECT_EQ(nlohmann::json::parse(f)["args"]["fp8"], "emulate");
  // the FP8 run under block checkpointing: the same curve as under selective
  const auto fp8_block = train_sft(config("emulate", "block"));
  for (size_t i = 0; i < fp8.losses.size(); ++i)
    EXPECT_NEAR(fp8_block.losses[i], fp8.losses[i], 1e-5 * std::abs(fp8.losses[i])) << "step " << i + 1;
}

TEST_F(Fp8Train, CausalLoraWithEmulatedFp8TracksTheBf16Curve) {
  auto config = [](const std::string& fp8) {
    auto c = test::causal_test_run(dir_->file("causal_data"), dir_->file("causal_" + fp8), "tiny",
                                   /*chunk_frames=*/1, /*steps=*/6);
    c.compute.fp8 = fp8, c.save_every = 6, c.val_clips = 1;
    return c;
  };
  const auto off = train_causal(config("off"));
  const auto fp8 = train_causal(config("emulate"));
  expect_close_curves(off.losses, fp8.losses, "causal");
  std::ifstream f(dir_->file("causal_emulate") + "/args.json");
  EXPECT_EQ(nlohmann::json::parse(f)["fp8"], "emulate");
}

}  // namespace fp8_blocks_test
}  // namespace vdt
