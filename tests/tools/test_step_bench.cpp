// `vdt bench step` runs the trainers' own steps (tools/step_bench.h): both trainers on the tiny preset on the CPU, and
// the model FLOPs of docs/BENCHMARKS.md.
#include <torch/torch.h>

#include <cmath>
#include <mutex>

#include "distributed/local_group.h"
#include "model/block_causal.h"
#include "model/h3/h3_config.h"
#include "model/h3/h3_dit.h"
#include "model/wan_dit.h"
#include "test_util.h"
#include "tools/step_bench.h"

namespace vdt {
namespace {

WindowShape window(int64_t text_len, int64_t frames, int64_t h, int64_t w, int64_t chunk_frames) {
  WindowShape s;
  s.text_len = text_len, s.frames = frames, s.latent_h = h, s.latent_w = w, s.chunk_frames = chunk_frames;
  return s;
}

// docs/BENCHMARKS.md's counts: SFT at the TI2V-5B geometry (21 x 30 x 52 latents = 8190 tokens, 512 text tokens);
// the causal LoRA rows, 6 chunks, frozen base, block-causal pairs.
TEST(StepBench, ModelFlopsMatchSpec) {
  EXPECT_NEAR(wan_train_flops(preset_config("wan2.2-ti2v-5b"), window(512, 21, 30, 52, 0), false) / 1e12, 293.9, 0.1);
  EXPECT_NEAR(wan_train_flops(preset_config("wan2.2-ti2v-5b"), window(512, 18, 30, 52, 3), true) / 1e12, 146.9, 0.1);
  EXPECT_NEAR(wan_train_flops(preset_config("wan2.1-t2v-1.3b"), window(512, 18, 60, 104, 3), true) / 1e12, 315.6, 0.1);
  auto h3 = window(256, 30, 30, 52, 5);
  h3.cond_rows = 15 * 26;  // Picture 1 at the target's grid
  EXPECT_NEAR(h3_train_flops(h3_preset("minimax-h3"), h3, true) / 1e12, 1244.5, 0.1);
}

// The block-causal count leaves out exactly the pairs the masks forbid, 4·D each per layer (3x for a step).
TEST(StepBench, BlockCausalFlopsCountTheMasksPairs) {
  const auto cfg = preset_config("tiny");
  const int64_t n = 3, frame_tokens = (4 / 2) * (6 / 2), c = 2 * frame_tokens;  // 3 chunks of 2 latent frames
  for (const bool teacher : {false, true}) {
    SCOPED_TRACE(teacher ? "teacher forcing" : "diffusion forcing");
    auto w = window(8, 6, 4, 6, 2);
    w.copies = teacher ? 2 : 1;
    auto whole = w;
    whole.chunk_frames = 0;
    const auto mask = teacher ? teacher_forcing_mask(n, c) : block_causal_mask(n, c);
    const double L = static_cast<double>(mask.size(0));
    const double allowed = mask.sum().item<double>();
    const double left_out =
        (wan_train_flops(cfg, whole, false) - wan_train_flops(cfg, w, false)) / (3.0 * cfg.num_layers * 4 * cfg.dim);
    EXPECT_NEAR(left_out, L * L - allowed, 1e-6 * allowed);
  }
}

TEST(StepBench, TimesBothTrainersOwnStepsOnCpu) {
  for (const char* trainer : {"sft", "causal"}) {
    SCOPED_TRACE(trainer);
    test::TempDir dir;
    StepBenchConfig cfg;
    cfg.trainer = trainer, cfg.model = "tiny", cfg.compute.device = "cpu", cfg.compute.precision = "fp32";
    cfg.lora_rank = 4;
    cfg.frames = 6, cfg.height = 4, cfg.width = 6, cfg.text_len = 8, cfg.steps = 2, cfg.warmup = 1;
    cfg.work_dir = dir.file("bench");
    auto single = make_single_rank();
    const auto r = run_step_bench(cfg, *single);
    ASSERT_EQ(r.step_s.size(), 3u);
    EXPECT_TRUE(std::isfinite(r.last_loss));
    EXPECT_GT(r.median_s, 0);
    EXPECT_EQ(r.tokens, 6 * 2 * 3);
    EXPECT_GT(r.tflop_per_step, 0);
  }
}

// `--checkpointing selective` in both trainers' steps: the same losses as block checkpointing (the gradients are equal
// to fp32 rounding, so later steps' losses are too); none is SFT only.
TEST(StepBench, SelectiveCheckpointingRunsBothTrainersWithBlocksLosses) {
  for (const char* trainer : {"sft", "causal"}) {
    SCOPED_TRACE(trainer);
    std::vector<double> losses[2];
    int i = 0;
    for (const char* mode : {"block", "selective"}) {
      test::TempDir dir;
      StepBenchConfig cfg;
      cfg.trainer = trainer, cfg.model = "tiny", cfg.compute.device = "cpu", cfg.compute.precision = "fp32";
      cfg.lora_rank = 4;
      cfg.frames = 6, cfg.height = 4, cfg.width = 6, cfg.text_len = 8, cfg.steps = 3, cfg.warmup = 0;
      cfg.memory.checkpointing = mode, cfg.work_dir = dir.file("bench");
      auto single = make_single_rank();
      losses[i++] = run_step_bench(cfg, *single).losses;
    }
    ASSERT_EQ(losses[0].size(), 3u);
    ASSERT_EQ(losses[1].size(), 3u);
    for (size_t s = 0; s < 3; ++s) EXPECT_NEAR(losses[0][s], losses[1][s], 1e-5 * (1 + std::abs(losses[0][s]))) << s;
  }
  StepBenchConfig bad;
  bad.trainer = "causal", bad.memory.checkpointing = "none";
  test::expect_error([&] { bad.validate(); }, {"--checkpointing none", "block or selective"});
  bad.trainer = "sft", bad.memory.checkpointing = "layers";
  test::expect_error([&] { bad.validate(); }, {"--checkpointing", "layers", "selective"});
}

// `--fp8` reaches the trainer's step: emulate moves the first loss by FP8's error (the same batch and weights; the
// causal trainer's random base, as Wan's zero-initialised head would hide the blocks in SFT's first loss), and a bad
// value names the flag.
TEST(StepBench, Fp8FlagReachesTheTrainersStep) {
  std::vector<double> losses[2];
  int i = 0;
  for (const char* fp8 : {"off", "emulate"}) {
    test::TempDir dir;
    StepBenchConfig cfg;
    cfg.trainer = "causal", cfg.model = "tiny", cfg.compute.device = "cpu", cfg.compute.precision = "fp32";
    cfg.lora_rank = 4;
    cfg.frames = 6, cfg.height = 4, cfg.width = 6, cfg.text_len = 8, cfg.steps = 1, cfg.warmup = 0;
    cfg.compute.fp8 = fp8, cfg.work_dir = dir.file("bench");
    auto single = make_single_rank();
    losses[i++] = run_step_bench(cfg, *single).losses;
  }
  ASSERT_EQ(losses[1].size(), 1u);
  EXPECT_NE(losses[0][0], losses[1][0]);
  EXPECT_NEAR(losses[0][0], losses[1][0], 0.05 * std::abs(losses[0][0]));
  StepBenchConfig bad;
  bad.compute.fp8 = "fp16";
  test::expect_error([&] { bad.validate(); }, {"--fp8", "'fp16'"});
}

// Several ranks: rank 0 writes the synthetic root into the directory every rank reads (the default temp directory
// is named the same on every rank), the trainer runs sharded (ZeRO-2), and every rank gets the timings.
TEST(StepBench, SeveralRanksShareOneRootAndRunSharded) {
  StepBenchConfig cfg;
  cfg.trainer = "sft", cfg.model = "tiny", cfg.compute.device = "cpu", cfg.compute.precision = "fp32";
  cfg.frames = 3, cfg.height = 4, cfg.width = 6, cfg.text_len = 8, cfg.steps = 2, cfg.warmup = 1;
  std::vector<StepBenchResult> out(2);
  std::mutex mu;
  run_local_ranks(2, [&](Communicator& comm) {
    auto r = run_step_bench(cfg, comm);
    std::lock_guard<std::mutex> lk(mu);
    out[static_cast<size_t>(comm.rank())] = r;
  });
  for (const auto& r : out) {
    EXPECT_EQ(r.step_s.size(), 3u);
    EXPECT_TRUE(std::isfinite(r.last_loss));
  }
  EXPECT_EQ(out[0].losses, out[1].losses);  // the loss is reduced over the ranks
}

}  // namespace
}  // namespace vdt
