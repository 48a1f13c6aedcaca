// The LoRA a causal run starts from decides its rank and alpha (issue 16): an --init-lora of alpha 8 trains with
// scale 8 / r, every file the run writes records it, so a run preempted and re-run equals the uninterrupted one; a
// --lora-rank or --lora-alpha that disagrees with the file is an error naming both values. And a base is required
// (--weights, or --random-init said explicitly).
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "model/lora.h"
#include "test_util.h"
#include "train/causal_test_util.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"

namespace vdt {
namespace {

using test::copy_before_last_save, test::expect_same_lora;

class CausalLoraShape : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    SynthConfig sc;
    sc.out = dir_->file("data"), sc.latent_frames = 14, sc.train_runs = 3, sc.train_clips_per_run = 3, sc.n_drop = 1;
    synth_root(sc);
    // An init LoRA of rank 4 and alpha 8 (B non-zero, so the scale matters from the first step): a 1-step run's
    // factors, saved with that alpha.
    auto c = config("init_src", 1);
    c.lora_rank = 4, c.lora_alpha = 4;
    auto sum = train_causal(c);
    NamedTensors factors;
    for (auto& [n, t] : sum.lora) factors.emplace_back(n, t + 0.01 * torch::ones_like(t));
    save_safetensors(dir_->file("init.safetensors"), factors, {{"rank", "4"}, {"alpha", "8"}});
  }
  static void TearDownTestSuite() { delete dir_; }
  static CausalConfig config(const std::string& name, int64_t steps) {
    CausalConfig c;
    c.data_root = dir_->file("data"), c.out = dir_->file(name);
    c.model = "tiny", c.random_init = true, c.device = "cpu", c.precision = "fp32", c.chunk_frames = 1;
    c.steps = steps, c.save_every = 4, c.val_clips = 3, c.lr = 1e-2, c.lr_min = 1e-4, c.warmup = 2;
    return c;
  }
  static test::TempDir* dir_;
};
test::TempDir* CausalLoraShape::dir_ = nullptr;

TEST_F(CausalLoraShape, TheInitFileDecidesAndAReRunEqualsTheUninterruptedRun) {
  auto full = config("init_full", 8);
  full.init_lora = dir_->file("init.safetensors");  // --lora-rank / --lora-alpha left out
  const auto ref = train_causal(full);
  for (const int step : {4, 8}) {
    const auto meta = SafetensorsFile::open(lora_step_path(full.out, step))->metadata();
    EXPECT_EQ(meta.at("rank"), "4");
    EXPECT_EQ(meta.at("alpha"), "8.0");  // what was applied, not a flag's default
  }
  const auto args = nlohmann::json::parse(std::ifstream(full.out + "/args.json"));
  EXPECT_EQ(args["lora_alpha"], "8.0");
  // Preempted after step 4 (the LoRA and state of step 8 never written), re-run with the same command.
  auto cut = config("init_cut", 8);
  cut.init_lora = full.init_lora;
  copy_before_last_save(full.out, cut.out, 8);
  const auto resumed = train_causal(cut);
  EXPECT_EQ(resumed.start_step, 4);
  expect_same_lora(ref.lora, resumed.lora);
  // Without the state slot (the seed's resume from the newest lora_step, fresh moments) the file's alpha still applies:
  // its first step's loss equals the uninterrupted run's step 5 up to the bf16 rounding of the lora_step file's factors
  // (measured 3e-6 relative; another alpha moves it far more).
  auto seedlike = config("init_seedlike", 8);
  seedlike.init_lora = full.init_lora;
  copy_before_last_save(full.out, seedlike.out, 8);
  for (const char* s : {"state_A", "state_B", "state"}) std::filesystem::remove_all(seedlike.out + "/" + s);
  const auto fresh = train_causal(seedlike);
  ASSERT_EQ(fresh.start_step, 4);
  EXPECT_NEAR(fresh.losses.front(), ref.losses[4], 1e-4 * std::abs(ref.losses[4]));
}

TEST_F(CausalLoraShape, AFlagThatDisagreesWithTheFileIsAnErrorNamingBoth) {
  auto c = config("disagree", 2);
  c.init_lora = dir_->file("init.safetensors");
  c.lora_alpha = 32;
  test::expect_error([&] { train_causal(c); }, {"--lora-alpha 32.0", "init.safetensors", "alpha 8.0"});
  c.lora_alpha = -1, c.lora_rank = 16;
  test::expect_error([&] { train_causal(c); }, {"--lora-rank 16", "init.safetensors", "rank 4"});
  c.lora_rank = 4, c.lora_alpha = 8;  // agreeing flags are fine
  EXPECT_EQ(train_causal(c).steps, 2);
  // A fresh LoRA without flags: rank 32, alpha 32 (the defaults before).
  auto fresh = config("fresh_default", 1);
  train_causal(fresh);
  const auto meta = SafetensorsFile::open(lora_step_path(fresh.out, 1))->metadata();
  EXPECT_EQ(meta.at("rank"), "32");
  EXPECT_EQ(meta.at("alpha"), "32.0");
}

// A rank-0 LoRA has nothing to train and alpha 0 scales its update to zero: both are refused before any work, naming
// the flag and what to give instead (the binary too: `vdt train causal --lora-rank 0` exits 2 with the message).
TEST_F(CausalLoraShape, RankZeroOrAlphaZeroIsRefused) {
  auto c = config("rank0", 1);
  c.lora_rank = 0;
  test::expect_error([&] { train_causal(c); }, {"--lora-rank 0", "expected >= 1", "leave --lora-rank out"});
  c.lora_rank = 4, c.lora_alpha = 0;
  test::expect_error([&] { train_causal(c); }, {"--lora-alpha 0", "expected > 0"});
  EXPECT_FALSE(std::filesystem::exists(c.out));
  const auto r = test::run_vdt("train causal --model tiny --random-init --device cpu --data-root " +
                               dir_->file("data") + " --out " + dir_->file("rank0_cli") + " --lora-rank 0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--lora-rank 0: expected >= 1"), std::string::npos) << r.output;
}

TEST_F(CausalLoraShape, ABaseIsRequired) {
  auto c = config("no_base", 1);
  c.random_init = false;
  test::expect_error([&] { train_causal(c); }, {"--weights is required", "--random-init"});
}

}  // namespace
}  // namespace vdt
