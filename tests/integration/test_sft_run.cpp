// The tiny preset trains on synthetic data end to end: loss falls, the adapter starts at exactly zero and grows,
// the validation gap uncond - cond opens (an untrained adapter gives exactly 0), the export reloads as a warm start.
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/sft/sft_trainer.h"
#include "train/checkpoint/train_state.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

using test::read_csv;

double mean_col(const std::vector<std::map<std::string, std::string>>& rows, const std::string& col, size_t from,
                size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += std::stod(rows[i].at(col));
  return s / static_cast<double>(to - from);
}

// One synthetic root and one trained run shared by the tests of this file. ctest runs each test in its own process,
// so the run is cached in the build tree (keyed by the binary's build time): the first process trains (under an flock,
// so parallel ctest processes wait instead of training twice) and leaves a `complete` marker; the others reuse it.
class SftRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Keyed by the test binary's build time, so a rebuilt binary never reuses a stale run.
    const auto built = fs::last_write_time("/proc/self/exe").time_since_epoch().count();
    const fs::path cache = fs::path(VDT_TEST_CACHE) / ("sft_tiny_run_" + std::to_string(built));
    fs::create_directories(cache);
    dir_ = new test::TempDir();
    root_ = (cache / "data").string();
    cfg_ = base_config((cache / "run").string());
    const int lock = ::open((cache / "lock").c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(lock, 0);
    ::flock(lock, LOCK_EX);
    SynthConfig sc;
    sc.out = root_, sc.train_runs = 5, sc.train_clips_per_run = 4, sc.overwrite = true;
    if (!fs::exists(cache / "complete")) {
      report_ = synth_root(sc);
      fs::remove_all(cfg_.output);
      train_sft(cfg_);
      std::ofstream(cache / "complete") << report_.res << "\n";
    }
    std::ifstream(cache / "complete") >> report_.res;
    ::flock(lock, LOCK_UN);
    ::close(lock);
    export_ = cfg_.output + "/step-160.safetensors";
  }
  static void TearDownTestSuite() { delete dir_; }
  static SftConfig base_config(const std::string& out) {
    SftConfig c;
    c.data_root = root_, c.output = out, c.res = report_.res.empty() ? "128x128" : report_.res;
    c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
    c.gradient_checkpointing = false;
    c.max_steps = 160, c.batch_size = 2, c.grad_accum = 1, c.lr = 5e-4, c.cond_lr = 2e-3, c.warmup_steps = 20;
    c.val_every = 80, c.val_n = 3, c.val_timesteps = "500,800", c.save_every = 160, c.num_workers = 2;
    return c;
  }
  static test::TempDir* dir_;
  static std::string root_, export_;
  static SynthReport report_;
  static SftConfig cfg_;
};
test::TempDir* SftRunTest::dir_ = nullptr;
std::string SftRunTest::root_, SftRunTest::export_;
SynthReport SftRunTest::report_;
SftConfig SftRunTest::cfg_;

TEST_F(SftRunTest, LossFallsAdapterGrowsFromZeroAndGapOpens) {
  const auto train = read_csv(cfg_.output + "/train_log.csv");
  ASSERT_EQ(train.size(), 160u);
  EXPECT_EQ(std::stod(train[0].at("sem_rms")), 0.0);  // proj_out is zero at step 1
  EXPECT_GT(std::stod(train.back().at("sem_rms")), 1e-2);
  // Unweighted MSE: the first 10 steps (random init) against the last 40.
  const double early = mean_col(train, "mse", 0, 10), late = mean_col(train, "mse", 120, 160);
  EXPECT_LT(late, 0.75 * early) << "early " << early << " late " << late;
  const auto val = read_csv(cfg_.output + "/val_log.csv");
  ASSERT_EQ(val.size(), 4u);  // 2 validations x 2 timesteps
  const double gap = mean_col(val, "gap_uncond", 2, 4), mse = mean_col(val, "mse", 2, 4);
  EXPECT_GT(gap, 0.1 * mse) << "gap_uncond " << gap << " mse " << mse;
}

TEST_F(SftRunTest, WritesEveryOutputAndAVerifiedExport) {
  for (const char* f : {"config.json", "train_log.csv", "val_log.csv", "done.json", "step-160.safetensors"})
    EXPECT_TRUE(fs::exists(fs::path(cfg_.output) / f)) << f;
  bool has_events = false;
  for (const auto& e : fs::directory_iterator(fs::path(cfg_.output) / "tensorboard"))
    has_events |= e.path().filename().string().find("tfevents") != std::string::npos && fs::file_size(e.path()) > 100;
  EXPECT_TRUE(has_events);
  const auto train = read_csv(cfg_.output + "/train_log.csv");
  EXPECT_EQ(train[0].size(), 19u);  // the Python trainer's 17 columns, then loss_mean and mse_mean
  std::ifstream cf(cfg_.output + "/config.json");
  const auto config = nlohmann::json::parse(cf);
  EXPECT_EQ(config["dataset"]["val_clip_ids"].size(), 3u);
  EXPECT_EQ(config["dataset"]["train_dropped_rows"].get<int>(), 2);
  auto f = SafetensorsFile::open(export_);
  EXPECT_EQ(f->keys().size(), 75u);  // 69 Wan keys of the tiny preset + 6 gc_sem_cond
  for (const auto& k : f->keys()) EXPECT_EQ(f->entry(k).dtype, "BF16") << k;
  EXPECT_EQ(f->metadata().at("vocab"), "parts");
  EXPECT_EQ(f->metadata().at("step"), "160");
  EXPECT_EQ(f->metadata().at("res"), report_.res);
}

// TensorBoard read back by tensorboard's own reader: the loss as train_log.csv has it, every flag in the HParams
// dashboard with its type, and at each validation (steps 80 and 160) the preview of val clip 0 (rows: ground truth,
// with conditions, without), as previews/step_NNNNNNN.png and as an image summary.
TEST_F(SftRunTest, TensorBoardHasHparamsAndPreviews) {
  EXPECT_TRUE(fs::exists(cfg_.output + "/previews/step_0000080.png"));
  EXPECT_TRUE(fs::exists(cfg_.output + "/previews/step_0000160.png"));
  const auto tb = test::read_tensorboard(cfg_.output + "/tensorboard");
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  const auto train = read_csv(cfg_.output + "/train_log.csv");
  ASSERT_EQ(tb.scalars.at("train/loss").size(), 160u);
  const double csv_loss = std::stod(train[9].at("loss"));  // the CSV prints 6 significant digits
  EXPECT_NEAR(tb.scalars.at("train/loss")[9].second, csv_loss, 1e-5 * std::abs(csv_loss));
  EXPECT_EQ(tb.hparams.size(), SftConfig::fields().size());
  EXPECT_EQ(tb.hparams.at("lr"), "n:0.0005");
  EXPECT_EQ(tb.hparams.at("model"), "s:tiny");
  EXPECT_EQ(tb.hparams.at("gradient_checkpointing"), "b:0");
  EXPECT_EQ(tb.metric_tags, (std::vector<std::string>{"train/loss", "val/mse_mean"}));
  ASSERT_EQ(tb.images.size(), 1u);
  const auto config = nlohmann::json::parse(std::ifstream(cfg_.output + "/config.json"));
  const std::string tag = "preview/" + config["dataset"]["val_clip_ids"][0].get<std::string>();
  ASSERT_EQ(tb.images.count(tag), 1u) << tb.images.begin()->first;
  const auto& ims = tb.images.at(tag);
  ASSERT_EQ(ims.size(), 2u);
  EXPECT_EQ(ims[0].step, 80);
  EXPECT_EQ(ims[1].step, 160);
  EXPECT_EQ(ims[0].height, ims[1].height);
  EXPECT_NE(ims[0].rgb, ims[1].rgb);  // the model trained between them
}

// Drawing previews changes no training number: the same short run with and without them.
TEST_F(SftRunTest, PreviewsChangeNoTrainingNumber) {
  auto on = base_config(dir_->file("preview_on"));
  on.max_steps = 4, on.val_every = 2, on.save_every = 0, on.preview_steps = 2, on.num_workers = 1;
  auto off = on;
  off.output = dir_->file("preview_off"), off.preview_steps = 0;
  const auto a = train_sft(on), b = train_sft(off);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  EXPECT_TRUE(fs::exists(on.output + "/previews/step_0000004.png"));
  EXPECT_FALSE(fs::exists(off.output + "/previews"));
}

TEST_F(SftRunTest, ExportWarmStartsANewRun) {
  auto c = base_config(dir_->file("warm"));
  c.max_steps = 2, c.val_every = 0, c.save_every = 2, c.resume = export_;
  const auto s = train_sft(c);
  const auto train = read_csv(c.output + "/train_log.csv");
  EXPECT_GT(std::stod(train[0].at("sem_rms")), 1e-2);  // the trained adapter came along
  EXPECT_EQ(SafetensorsFile::open(s.last_export)->metadata().at("init_ckpt"), export_);

  // A plain Wan export (no adapter keys) warm-starts with the adapter still zero.
  auto full = SafetensorsFile::open(export_);
  std::vector<std::pair<std::string, torch::Tensor>> plain;
  for (const auto& k : full->keys())
    if (k.rfind("gc_sem_cond.", 0) != 0) plain.emplace_back(k, full->get(k));
  save_safetensors(dir_->file("plain.safetensors"), plain);
  c.output = dir_->file("warm_plain"), c.resume = dir_->file("plain.safetensors");
  train_sft(c);
  EXPECT_EQ(std::stod(read_csv(c.output + "/train_log.csv")[0].at("sem_rms")), 0.0);

  // A vocabulary mismatch is an error naming both.
  c.output = dir_->file("warm_vocab"), c.resume = export_, c.vocab = "ids";
  test::expect_error([&] { train_sft(c); }, {"--resume", "vocab is 'parts'", "--vocab ids"});
}

TEST_F(SftRunTest, BadConfigurationFailsBeforeTraining) {
  auto c = base_config(dir_->file("bad"));
  c.res = "832x480";
  test::expect_error([&] { train_sft(c); }, {"dataset.json", "832x480", report_.res});
  c = base_config(dir_->file("bad2"));
  c.model = "wan2.1-t2v-1.3b";
  test::expect_error([&] { train_sft(c); }, {"text_dim 64", "--model wan2.1-t2v-1.3b"});
  c = base_config(dir_->file("bad3"));
  c.mask_p = 1.5;
  test::expect_error([&] { train_sft(c); }, {"--mask_p", "1.5"});
}

TEST_F(SftRunTest, NonFiniteLossStopsAndKeepsTheLastExport) {
  auto c = base_config(dir_->file("nan"));
  c.max_steps = 6, c.val_every = 0, c.save_every = 1, c.lr = 1e30, c.cond_lr = 1e30, c.warmup_steps = 0;
  test::expect_error([&] { train_sft(c); }, {"non-finite", "intact", "state_A"});
  // The last good state (step 1) loads.
  const auto st = load_trainer_state(c.output, false);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->st.step, 1);
  // Every export written before the stop is complete and loadable.
  int n = 0;
  for (const auto& e : fs::directory_iterator(c.output))
    if (e.path().extension() == ".safetensors") {
      EXPECT_NO_THROW(SafetensorsFile::open(e.path().string())->get("head.head.weight"));
      ++n;
    }
  EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace vdt
