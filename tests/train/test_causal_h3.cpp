// `vdt train causal` on a MiniMax-H3 base (h3-tiny, CPU) and a synthetic H3 root (Picture 1, the silent audio stream,
// token tags): spans of 6 one-clip chunks, diffusion forcing and teacher forcing train, --picture1 2048 and the
// seed's LoRA metadata, exact resume, two in-process ranks keep one LoRA, and a root of the wrong family or without
// the 2048 Picture 1 is refused up front.
#include <torch/torch.h>

#include <filesystem>

#include "core/safetensors.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/causal_test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;
using test::copy_before_last_save, test::expect_same_lora, test::read_jsonl, test::run_two_ranks;

class CausalH3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    SynthConfig sc;  // 7 train (1 flagged) + 2 val clips of 32 latents at 4x4: one 30-latent window each
    sc.out = dir_->file("h3"), sc.model = "h3", sc.latent_channels = 24, sc.text_dim = 48, sc.latent_frames = 32;
    sc.latent_h = 4, sc.latent_w = 4, sc.train_runs = 3, sc.train_clips_per_run = 2, sc.val_runs = 1, sc.n_drop = 1;
    synth_root(sc);
  }
  static void TearDownTestSuite() { delete dir_; }
  static CausalConfig config(const std::string& name, int64_t steps) {
    CausalConfig c;
    c.data_root = dir_->file("h3"), c.out = dir_->file(name);
    c.model = "h3-tiny", c.random_init = true, c.device = "cpu", c.precision = "fp32", c.lora_rank = 4;
    c.lora_alpha = 4;
    c.steps = steps, c.save_every = 4, c.val_clips = 2, c.lr = 1e-2, c.lr_min = 1e-4, c.warmup = 2;
    return c;
  }
  static test::TempDir* dir_;
};
test::TempDir* CausalH3Test::dir_ = nullptr;

TEST_F(CausalH3Test, DiffusionForcingValidationLossFalls) {
  auto c = config("df", 40);
  c.val_every = 40, c.save_every = 40;
  const auto sum = train_causal(c);
  const auto val = read_jsonl(c.out + "/val_log.jsonl");
  ASSERT_EQ(val.size(), 2u);
  EXPECT_LT(val[1]["val_loss"].get<double>(), 0.85 * val[0]["val_loss"].get<double>())
      << val[0].dump() << " -> " << val[1].dump();
  const auto meta = SafetensorsFile::open(lora_step_path(c.out, 40))->metadata();
  EXPECT_EQ(meta.at("base"), "cwm");  // the seed's name for its H3 world model
  EXPECT_EQ(meta.at("model"), "h3-tiny");
  EXPECT_EQ(meta.at("chunk_frames"), "5");  // the natural chunk: one VAE clip
  EXPECT_NE(meta.at("text_handling").find("4.2a"), std::string::npos);
  EXPECT_EQ(sum.lora.size(), 2u * 4 * 3);  // A, B x 4 targets x (2 blocks + 1 refiner block)
}

TEST_F(CausalH3Test, TeacherForcingAndPicture2048Train) {
  auto c = config("tf", 4);
  c.objective = "tf", c.picture1 = "2048";
  const auto sum = train_causal(c);
  EXPECT_TRUE(std::isfinite(sum.last_loss));
  for (const auto& row : read_jsonl(c.out + "/train_log.jsonl")) EXPECT_GT(row["gnorm"].get<double>(), 0);
}

TEST_F(CausalH3Test, ResumeFromTheStateSlotIsExact) {
  auto full = config("exact_full", 8);
  const auto ref = train_causal(full);
  auto cut = config("exact_cut", 8);
  copy_before_last_save(full.out, cut.out, 8);
  const auto resumed = train_causal(cut);
  EXPECT_EQ(resumed.start_step, 4);
  EXPECT_NE(resumed.resume_how.find("exact"), std::string::npos) << resumed.resume_how;
  expect_same_lora(ref.lora, resumed.lora);
}

TEST_F(CausalH3Test, TwoRanksKeepOneLora) {
  auto c = config("ranks", 4);
  c.shard_base = "on";
  const auto r = run_two_ranks(c);
  expect_same_lora(r[0].lora, r[1].lora);
  EXPECT_EQ(r[0].lora_crc, r[1].lora_crc);
}

TEST_F(CausalH3Test, WrongRootsAreRefusedUpFront) {
  test::TempDir d;
  SynthConfig wan;
  wan.out = d.file("wan"), wan.latent_channels = 24, wan.text_dim = 48, wan.latent_frames = 32;
  wan.train_runs = 2, wan.val_runs = 1, wan.n_drop = 0;
  synth_root(wan);
  auto c = config("wrong", 2);
  c.data_root = wan.out;
  test::expect_error([&] { train_causal(c); }, {"a wan root (model_family)", "h3", "--model h3-tiny"});
  // A root without 2048 Picture 1 latents: --picture1 2048 names a clip's file before any step.
  const std::string copy = d.file("no2048");
  fs::copy(dir_->file("h3"), copy, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(copy + "/latents")) {
    const std::string lat = e.path().string();
    auto f = SafetensorsFile::open(lat);
    save_safetensors(lat + ".new", {{"latents", f->get("latents").clone()}, {"picture1", f->get("picture1").clone()}});
    f.reset();
    fs::rename(lat + ".new", lat);
  }
  c = config("no2048", 2);
  c.data_root = copy, c.picture1 = "2048";
  test::expect_error([&] { train_causal(c); }, {copy + "/latents/", "picture1_2048", "--picture1 native"});
}

}  // namespace
}  // namespace vdt
