// Golden loss curves: the first 20 losses and gradient norms of the tiny presets, fp32 on the CPU, for `train sft`
// (gc_sem_cond adapter, per-cell text, the three dropouts, gradient accumulation, block checkpointing) and `train
// causal` (df and tf on Wan's tiny; df on h3-tiny with Picture 1 and the silent audio stream), compared to
// tests/assets/golden_curves.json at 1e-5 relative. They guard every refactoring: a change that moves them on purpose
// regenerates the file in its own commit and says why:
//   VDT_UPDATE_GOLDEN=1 build/vdt_tests --gtest_filter='GoldenCurves.*'
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"
#include "train/causal_test_util.h"
#include "train/sft/sft_trainer.h"
#include "train/sft_test_util.h"

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

class GoldenCurves : public test::SuiteDirTest<GoldenCurves> {
 public:
  static void write_suite_files(const test::TempDir& dir) {
    res_ = test::write_sft_root(dir.file("sft_data"), /*train_runs=*/3, /*clips_per_run=*/4, /*n_drop=*/2);
    synth_root(test::wan_causal_root(dir.file("causal_data")));
    synth_root(test::h3_causal_root(dir.file("h3_data"), /*train_runs=*/3));
  }

 protected:
  static CausalConfig causal_config(const std::string& objective) {
    auto c = test::causal_test_run(dir_->file("causal_data"), dir_->file("causal_" + objective), "tiny",
                                   /*chunk_frames=*/1, kSteps);
    c.objective = objective, c.save_every = 10;
    return c;
  }
  static inline std::string res_;
};

TEST_F(GoldenCurves, SftAdapterPerCellTextDropouts) {
  SftConfig c;
  c.data_root = dir_->file("sft_data"), c.output = dir_->file("sft_run"), c.res = res_;
  c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
  c.gradient_checkpointing = true;
  c.max_steps = kSteps, c.batch_size = 2, c.grad_accum = 2, c.lr = 5e-4, c.cond_lr = 2e-3, c.warmup_steps = 5;
  c.val_every = 0, c.save_every = 0,
  c.num_workers = 2;  // dropouts at the Python trainer's defaults (0.1, 0.05, mask 0.5)
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
