// The LoRA a causal run starts from decides its rank and alpha: an --init-lora of alpha 8 trains with
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
#include "generate/generation_model.h"
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
    c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32", c.chunk_frames = 1;
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
  // Without the state slot (the Python trainer's resume from the newest lora_step, fresh moments) the file's alpha
  // still applies: its first step's loss equals the uninterrupted run's step 5 up to the bf16 rounding of the lora_step
  // file's factors (measured 3e-6 relative; another alpha moves it far more).
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

// A vdt LoRA file means the same to a loader that reads no metadata: DiffSynth's GeneralLoRALoader finds kohya's
// `<module>.alpha` beside each pair, multiplies A by alpha / rank and merges W += B A. That merge of a run's file
// (rank 4, alpha 8: a lost alpha halves the LoRA) gives the forward of vdt's own load of it.
TEST_F(CausalLoraShape, AFileMergedTheWayDiffSynthMergesItGivesTheSameForward) {
  auto c = config("diffsynth_merge", 2);
  c.init_lora = dir_->file("init.safetensors");
  train_causal(c);
  const std::string file = lora_step_path(c.out, 2);
  auto f = SafetensorsFile::open(file);
  std::map<std::string, torch::Tensor> raw;  // the file as a state dict, read without its metadata
  for (const auto& k : f->keys()) raw[k] = f->get(k).to(torch::kFloat32);
  int64_t alphas = 0;
  for (const auto& [k, t] : raw)
    if (k.size() > 6 && k.substr(k.size() - 6) == ".alpha") {
      ++alphas;
      EXPECT_EQ(t.item<float>(), 8.0f) << k;
    }
  EXPECT_EQ(alphas * 3, static_cast<int64_t>(raw.size()));  // one alpha per (A, B) pair
  // vdt: the base with the file loaded onto attached factors.
  const auto vdt_model = build_base("tiny", "", c.random.seed, torch::kCPU, torch::kFloat32);
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 1, lc.targets = vdt_model->lora_targets();  // the file's alpha replaces this one
  attach_lora(*vdt_model, lc, 0);
  load_lora(*vdt_model, read_lora(file), file);
  // DiffSynth's merge: for each <module>.lora_B.weight, A * (<module>.alpha / rank), then W += B A at scale 1.
  const auto merged = build_base("tiny", "", c.random.seed, torch::kCPU, torch::kFloat32);
  {
    torch::NoGradGuard ng;
    auto params = merged->named_parameters();
    int64_t fused = 0;
    for (const auto& [k, b] : raw) {
      const std::string suffix = ".lora_B.weight";
      if (k.size() <= suffix.size() || k.substr(k.size() - suffix.size()) != suffix) continue;
      const std::string m = k.substr(0, k.size() - suffix.size());
      auto a = raw.at(m + ".lora_A.weight");
      if (raw.count(m + ".alpha")) a = a * (raw.at(m + ".alpha") / a.size(0));
      params[m + ".weight"].add_(torch::mm(b, a));
      ++fused;
    }
    EXPECT_EQ(fused, alphas);
  }
  torch::manual_seed(5);
  const auto x = torch::randn({1, vdt_model->latent_channels(), 2, 4, 4});
  const auto ctx = torch::randn({1, 6, vdt_model->text_dim()});
  const auto t = torch::full({1}, 600.0);
  torch::NoGradGuard ng;
  const auto want = vdt_model->forward({x, t, ctx});
  const auto got = merged->forward({x, t, ctx});
  const auto base = build_base("tiny", "", c.random.seed, torch::kCPU, torch::kFloat32)->forward({x, t, ctx});
  EXPECT_GT((want - base).abs().max().item<double>(), 1e-4);  // the LoRA moves the output
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-5 * (want - base).abs().max().item<double>() + 1e-6);
}

// The per-module alphas must agree with each other and with the metadata; read_lora says which key is off.
TEST_F(CausalLoraShape, AlphaTensorsThatDisagreeAreAnErrorNamingTheKey) {
  NamedTensors t = {{"blocks.0.self_attn.q.lora_A.weight", torch::randn({4, 8})},
                    {"blocks.0.self_attn.q.lora_B.weight", torch::randn({8, 4})},
                    {"blocks.0.self_attn.q.alpha", torch::tensor(8.0f)},
                    {"blocks.0.self_attn.k.lora_A.weight", torch::randn({4, 8})},
                    {"blocks.0.self_attn.k.lora_B.weight", torch::randn({8, 4})},
                    {"blocks.0.self_attn.k.alpha", torch::tensor(8.0f)}};
  save_safetensors(dir_->file("kohya.safetensors"), t);  // no metadata: the tensors decide
  EXPECT_EQ(read_lora(dir_->file("kohya.safetensors")).alpha, 8.0);
  EXPECT_EQ(read_lora_shape(dir_->file("kohya.safetensors")).alpha, 8.0);
  save_safetensors(dir_->file("kohya_meta.safetensors"), t, {{"alpha", "4"}});
  test::expect_error([&] { read_lora(dir_->file("kohya_meta.safetensors")); },
                     {"kohya_meta.safetensors", "alpha 4", "8"});
  t[5].second = torch::tensor(2.0f);
  save_safetensors(dir_->file("kohya_mixed.safetensors"), t);
  test::expect_error([&] { read_lora(dir_->file("kohya_mixed.safetensors")); },
                     {"kohya_mixed.safetensors", "blocks.0.self_attn.k.alpha", "one alpha"});
}

}  // namespace
}  // namespace vdt
