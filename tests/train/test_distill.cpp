// `vdt train distill` on the CPU (docs/distill.md): the tiny and h3-tiny bases train a few-step student on one
// resident base and write it in the causal LoRA format; the rollout's gradients come from the exit steps only (the
// steps before run without autograd, the commits too, and a chunk's output does not depend on an earlier chunk's
// graph); the committed keys equal a rollout without gradients; two ranks hold the same LoRAs; a run resumed at
// every save point ends with the uninterrupted run's student, critic and EMA, bit for bit.
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "distributed/local_group.h"
#include "model/lora.h"
#include "generate/lora_file.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/causal_test_util.h"
#include "train/distill/distill_run.h"
#include "train/distill/distill_step.h"
#include "train/distill/distill_trainer.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

class DistillTest : public test::SuiteDirTest<DistillTest> {
 public:
  static void write_suite_files(const test::TempDir& dir) {
    synth_root(test::wan_causal_root(dir.file("data")));
    synth_root(test::h3_causal_root(dir.file("h3"), 2));
  }

 protected:
  // A short run on the tiny base: chunks of one latent, 3-chunk rollouts (2..3 drawn), rank-4 LoRAs, fp32 on the CPU,
  // learning rates large enough to move in a few steps, a student update every 2 steps, the EMA from step 2.
  static DistillConfig config(const std::string& name, int64_t steps) {
    DistillConfig c;
    c.data_root = dir_->file("data"), c.out = dir_->file(name);
    c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
    c.chunk_frames = 1, c.chunks = 3, c.min_chunks = 2, c.lora_rank = 4, c.lora_alpha = 4;
    c.steps = steps, c.critic_ratio = 2, c.lr = 1e-3, c.critic_lr = 1e-3, c.ema = 0.5, c.ema_start = 2;
    c.save_every = 1, c.val_clips = 3;
    return c;
  }
};

std::map<std::string, std::string> metadata(const std::string& path) { return SafetensorsFile::open(path)->metadata(); }

TEST_F(DistillTest, TrainsTinyAndWritesAFewStepStudent) {
  auto c = config("tiny", 3);
  c.val_every = 3;
  const auto sum = train_distill(c);
  ASSERT_EQ(sum.steps, 3);
  ASSERT_EQ(sum.critic_losses.size(), 3u);
  for (const auto l : sum.critic_losses) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
  EXPECT_TRUE(std::isfinite(sum.student_losses[0]) && std::isfinite(sum.student_losses[2]));  // steps 1 and 3
  EXPECT_TRUE(std::isnan(sum.student_losses[1]));
  // The critic started at B = 0 and trained; the student moved from its (fresh) start.
  double critic_b = 0, student_b = 0;
  for (const auto& [n, p] : sum.critic)
    critic_b += n.find("lora_B") != std::string::npos ? p.abs().sum().item<double>() : 0;
  for (const auto& [n, p] : sum.student)
    student_b += n.find("lora_B") != std::string::npos ? p.abs().sum().item<double>() : 0;
  EXPECT_GT(critic_b, 0);
  EXPECT_GT(student_b, 0);
  ASSERT_FALSE(sum.ema.empty());  // started at step 3 (the first student update from --ema-start 2)
  // The student in the causal LoRA format, saying what it is.
  const auto path = c.out + "/lora_step00003.safetensors";
  ASSERT_TRUE(fs::exists(path));
  ASSERT_TRUE(fs::exists(c.out + "/lora_step00003_ema.safetensors"));
  const auto m = metadata(path);
  EXPECT_EQ(m.at("student"), "few-step");
  EXPECT_EQ(m.at("objective"), "dmd");
  EXPECT_EQ(m.at("rank"), "4");
  // What vdt sample reads (generate/lora_file.h): the student's steps on the shifted grid and its sampler.
  const auto meta = read_lora_meta(path);
  EXPECT_EQ(meta.student_steps, 4);
  ASSERT_EQ(meta.student_timesteps.size(), 4u);
  EXPECT_EQ(meta.student_timesteps[0], 1000.0);
  EXPECT_NEAR(meta.student_timesteps[3], 625.0, 1e-9);
  EXPECT_EQ(meta.student_sampler, "renoise");
  EXPECT_EQ(meta.ema, 0.0);
  EXPECT_EQ(read_lora_meta(c.out + "/lora_step00003_ema.safetensors").ema, 0.5);
  const auto lora = read_lora(path);
  EXPECT_EQ(lora.modules.size() * 2, sum.student.size());
  // The log: a row per step, the student's columns on its steps.
  const auto rows = test::read_csv(c.out + "/train_log.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_FALSE(rows[0].at("student_loss").empty());
  EXPECT_TRUE(rows[1].at("student_loss").empty());
  EXPECT_FALSE(rows[2].at("dmd_grad_norm").empty());
  // One resident base: the model's parameters are the base's and the two sets' factors, nothing more.
  EXPECT_GT(sum.base_params, 0);
  EXPECT_EQ(sum.student_params, sum.critic_params);  // the critic's rank defaults to the student's
}

TEST_F(DistillTest, TrainsH3TinyWithPicture1AndAudio) {
  DistillConfig c;
  c.data_root = dir_->file("h3"), c.out = dir_->file("h3run");
  c.model = "h3-tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
  c.chunks = 2, c.lora_rank = 4, c.lora_alpha = 4, c.steps = 2, c.critic_ratio = 1, c.lr = 1e-3, c.critic_lr = 1e-3;
  c.save_every = 2, c.val_clips = 1;
  const auto sum = train_distill(c);
  ASSERT_EQ(sum.steps, 2);
  for (const auto l : sum.critic_losses) EXPECT_TRUE(std::isfinite(l)) << l;
  for (const auto l : sum.student_losses) EXPECT_TRUE(std::isfinite(l)) << l;
  const auto m = metadata(c.out + "/lora_step00002.safetensors");
  EXPECT_EQ(m.at("student"), "few-step");
  EXPECT_EQ(m.at("base"), "cwm");
}

// The rollout's graph: with the exit index at the last of 3 steps, per chunk two passes without autograd, one with it,
// then the commit without; a later chunk's output is not connected to an earlier chunk's (the detached history); the
// committed keys and the outputs equal those of the same rollout without gradients.
TEST_F(DistillTest, GradientsComeFromTheExitStepsOnly) {
  auto c = config("graph", 1);
  c.student_steps = "1000,750,500";
  auto single = make_single_rank();
  auto run = build_distill_run(c, *single, 0);
  auto& r = *run;
  std::vector<bool> grad_calls;  // per block call: autograd on
  const auto inner = r.model->block_runner();
  r.model->set_block_runner([&](const BlockCall& call) {
    grad_calls.push_back(torch::GradMode::is_enabled());
    return inner ? inner(call) : call.run(call.inputs);
  });
  DistillDraws d;
  d.chunks = 3, d.exit_index = 2;
  const auto w = distill_window(r, 0, d.chunks * r.cfg.chunk_frames);
  ActiveLora student(*r.model, kStudentSet);
  RolloutTrace with, without;
  const auto x = student_rollout(r, w, d, true, 1, 0, &with);
  const int64_t blocks = static_cast<int64_t>(r.model->block_modules().size());
  // opening the stream (the text's cross-attention keys and values, once); chunk 0, 1: 3 steps + commit; chunk 2: 3
  // steps; each pass `blocks` calls
  std::vector<bool> want(static_cast<size_t>(blocks), false);
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t j = 0; j < 3; ++j) want.insert(want.end(), blocks, j == 2);
    if (n < 2) want.insert(want.end(), blocks, false);
  }
  EXPECT_EQ(grad_calls, want);
  ASSERT_EQ(with.chunks.size(), 3u);
  for (const auto& ch : with.chunks) EXPECT_TRUE(ch.video.requires_grad());
  const auto unused = torch::autograd::grad({with.chunks[2].video.sum()}, {with.chunks[0].video}, {}, true, false,
                                            /*allow_unused=*/true);
  EXPECT_FALSE(unused[0].defined());  // the detached history: chunk 2 does not see chunk 0's graph
  grad_calls.clear();
  {
    torch::NoGradGuard ng;
    const auto y = student_rollout(r, w, d, false, 1, 0, &without);
    EXPECT_TRUE(torch::equal(x.video.detach(), y.video));
  }
  for (const bool g : grad_calls) EXPECT_FALSE(g);
  ASSERT_EQ(with.committed_keys.size(), 2u);  // chunks 0 and 1 (the last one is not committed)
  for (size_t n = 0; n < 2; ++n)
    for (size_t b = 0; b < with.committed_keys[n].size(); ++b) {
      EXPECT_FALSE(with.committed_keys[n][b].requires_grad());
      EXPECT_TRUE(torch::equal(with.committed_keys[n][b], without.committed_keys[n][b])) << n << " " << b;
    }
  // Gradients reach the student's factors only.
  x.video.square().sum().backward();
  for (const auto& [n, p] : r.critic) EXPECT_FALSE(p.grad().defined()) << n;
  double g = 0;
  for (const auto& [n, p] : r.student) g += p.grad().defined() ? p.grad().abs().sum().item<double>() : 0;
  EXPECT_GT(g, 0);
}

TEST_F(DistillTest, TwoRanksHoldTheSameLoras) {
  auto c = config("ranks", 2);
  std::vector<DistillSummary> sums(2);
  std::mutex mu;
  run_local_ranks(2, [&](Communicator& comm) {
    auto s = train_distill(c, comm, 0);
    std::lock_guard<std::mutex> lk(mu);
    sums[static_cast<size_t>(comm.rank())] = s;
  });
  EXPECT_EQ(sums[0].student_crc, sums[1].student_crc);
  EXPECT_EQ(sums[0].critic_crc, sums[1].critic_crc);
  EXPECT_EQ(sums[0].exit_indices, sums[1].exit_indices);
  EXPECT_EQ(sums[0].critic_losses, sums[1].critic_losses);  // reduced over the ranks
}

// A run stopped after step k (its last save) and re-run to the end equals the uninterrupted run, for every k.
TEST_F(DistillTest, ResumesExactlyFromEverySavePoint) {
  constexpr int64_t kSteps = 4;
  const auto full = train_distill(config("full", kSteps));
  ASSERT_FALSE(full.ema.empty());
  const auto full_log = test::read_csv(dir_->file("full") + "/train_log.csv", {"sec"});
  for (int64_t k = 1; k < kSteps; ++k) {
    SCOPED_TRACE("stopped after step " + std::to_string(k));
    const std::string name = "cut" + std::to_string(k);
    train_distill(config(name, k));
    const auto resumed = train_distill(config(name, kSteps));
    EXPECT_EQ(resumed.start_step, k);
    EXPECT_NE(resumed.resume_how.find("exact"), std::string::npos) << resumed.resume_how;
    test::expect_same_lora(full.student, resumed.student);
    test::expect_same_lora(full.critic, resumed.critic);
    test::expect_same_lora(full.ema, resumed.ema);
    EXPECT_EQ(full_log, test::read_csv(dir_->file(name) + "/train_log.csv", {"sec"}));
  }
}

}  // namespace
}  // namespace vdt
