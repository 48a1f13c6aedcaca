// `vdt bench step` runs the trainers' own steps (tools/step_bench.h): both trainers on the tiny preset on the CPU, and
// the model FLOPs of docs/BENCHMARKS.md.
#include <torch/torch.h>

#include <cmath>
#include <mutex>

#include "distributed/local_group.h"
#include "model/wan_dit.h"
#include "test_util.h"
#include "tools/step_bench.h"

namespace vdt {
namespace {

// docs/BENCHMARKS.md: 294 TFLOP per step at the TI2V-5B geometry (8190 tokens, 512 text tokens).
TEST(StepBench, ModelFlopsMatchSpec) {
  EXPECT_NEAR(wan_train_flops(preset_config("wan2.2-ti2v-5b"), 8190, 512) / 1e12, 294, 3);
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
