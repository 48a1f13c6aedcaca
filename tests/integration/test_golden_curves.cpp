// Golden loss curves: the first 20 losses and gradient norms of the tiny presets, fp32 on the CPU, for `train sft`
// (gc_sem_cond adapter, per-cell text, the three dropouts, gradient accumulation, block checkpointing) and `train
// causal` (df and tf on Wan's tiny; df on h3-tiny with Picture 1 and the silent audio stream), compared to tests/assets/golden_curves.json at 1e-5 relative. They guard every refactoring: a
// change that moves them on purpose regenerates the file in its own commit and says why:
//   VDT_UPDATE_GOLDEN=1 build/vdt_tests --gtest_filter='GoldenCurves.*'
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"
#include "train/sft/sft_trainer.h"

namespace vdt {
namespace {

constexpr int64_t kSteps = 20;
constexpr double kRelTol = 1e-5;
const std::string kAssets = std::string(VDT_TEST_ASSETS) + "/golden_curves.json";

nlohmann::json curve(const std::vector<double>& losses, const std::vector<double>& norms) {
  return {{"loss", losses}, {"grad_norm", norms}};
}

// Compares `got` with the stored curve `name`, or stores it when VDT_UPDATE_GOLDEN is set.
void check_golden(const std::string& name, const nlohmann::json& got) {
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  if (std::ifstream f(kAssets); f) all = nlohmann::ordered_json::parse(f);
  if (std::getenv("VDT_UPDATE_GOLDEN")) {
    all[name] = got;
    std::ofstream(kAssets) << all.dump(1) << "\n";
    GTEST_SKIP() << "wrote " << name << " to " << kAssets;
  }
  ASSERT_TRUE(all.contains(name)) << kAssets << " has no curve '" << name << "'; run with VDT_UPDATE_GOLDEN=1";
  for (const char* key : {"loss", "grad_norm"}) {
    const auto want = all[name][key].get<std::vector<double>>();
    const auto have = got[key].get<std::vector<double>>();
    ASSERT_EQ(have.size(), want.size()) << name << "." << key;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(std::abs(have[i] - want[i]), kRelTol * std::abs(want[i]) + 1e-12)
          << name << "." << key << " step " << i + 1 << ": " << have[i] << " vs golden " << want[i];
  }
}

class GoldenCurves : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    SynthConfig sft;
    sft.out = dir_->file("sft_data"), sft.train_runs = 3, sft.train_clips_per_run = 4;
    res_ = synth_root(sft).res;
    SynthConfig causal;
    causal.out = dir_->file("causal_data"), causal.latent_frames = 14, causal.train_runs = 3;
    causal.train_clips_per_run = 3, causal.n_drop = 1;
    synth_root(causal);
    SynthConfig h3;  // one 30-latent window per clip: 6 one-clip chunks
    h3.out = dir_->file("h3_data"), h3.model = "h3", h3.latent_channels = 24, h3.text_dim = 48, h3.latent_frames = 32;
    h3.latent_h = 4, h3.latent_w = 4, h3.train_runs = 3, h3.train_clips_per_run = 2, h3.val_runs = 1;
    synth_root(h3);
  }
  static void TearDownTestSuite() { delete dir_; }

  static CausalConfig causal_config(const std::string& objective) {
    CausalConfig c;
    c.data_root = dir_->file("causal_data"), c.out = dir_->file("causal_" + objective), c.objective = objective;
    c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32", c.chunk_frames = 1;
    c.lora_rank = 4, c.lora_alpha = 4;
    c.steps = kSteps, c.save_every = 10, c.val_clips = 3, c.lr = 1e-2, c.lr_min = 1e-4, c.warmup = 2;
    return c;
  }
  static test::TempDir* dir_;
  static std::string res_;
};
test::TempDir* GoldenCurves::dir_ = nullptr;
std::string GoldenCurves::res_;

TEST_F(GoldenCurves, SftAdapterPerCellTextDropouts) {
  SftConfig c;
  c.data_root = dir_->file("sft_data"), c.output = dir_->file("sft_run"), c.res = res_;
  c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
  c.gradient_checkpointing = true;
  c.max_steps = kSteps, c.batch_size = 2, c.grad_accum = 2, c.lr = 5e-4, c.cond_lr = 2e-3, c.warmup_steps = 5;
  c.val_every = 0, c.save_every = 0, c.num_workers = 2;  // dropouts at the Python trainer's defaults (0.1, 0.05, mask 0.5)
  const auto sum = train_sft(c);
  check_golden("sft", curve(sum.losses, sum.grad_norms));
}

TEST_F(GoldenCurves, CausalDiffusionForcing) {
  const auto sum = train_causal(causal_config("df"));
  check_golden("causal_df", curve(sum.losses, sum.grad_norms));
}

// MiniMax-H3's loss on its own training grid (shift 2.22) with float32 model timesteps (docs/h3.md).
TEST_F(GoldenCurves, CausalH3DiffusionForcing) {
  auto c = causal_config("h3_df");
  c.data_root = dir_->file("h3_data"), c.objective = "df", c.model = "h3-tiny", c.chunk_frames = 0, c.val_clips = 1;
  const auto sum = train_causal(c);
  check_golden("causal_h3_df", curve(sum.losses, sum.grad_norms));
}

TEST_F(GoldenCurves, CausalTeacherForcing) {
  const auto sum = train_causal(causal_config("tf"));
  check_golden("causal_tf", curve(sum.losses, sum.grad_norms));
}

}  // namespace
}  // namespace vdt
