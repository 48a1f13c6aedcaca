// Golden loss curves: the first 20 losses and gradient norms of the tiny presets, fp32 on the CPU, for `train sft`
// (gc_sem_cond adapter, per-cell text, the three dropouts, gradient accumulation, block checkpointing) and `train
// causal` (df and tf on Wan's tiny; df on h3-tiny with Picture 1 and the silent audio stream), compared to
// tests/assets/golden_curves.json at 1e-5 relative; and the learning pipeline in short (a bidirectional teacher, the
// causal LoRA trained on it, their 4-step samples and `vdt eval`'s distances to the data, at 1e-4 relative). They
// guard every refactoring: a change that moves them on purpose regenerates the file in its own commit and says why:
//   VDT_UPDATE_GOLDEN=1 build/vdt_tests --gtest_filter='GoldenCurves.*'
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tools/ckpt_export.h"
#include "tools/latent_eval.h"
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
  for (const auto& [key, stored] : all[name].items()) {  // loss, grad_norm; the pipeline's distances too
    ASSERT_TRUE(got.contains(key)) << name << " has no '" << key << "' this time";
    const auto want = stored.get<std::vector<double>>();
    const auto have = got[key].get<std::vector<double>>();
    // A distance comes from a sampler in another process and a covariance's square root: 1e-4 of it.
    const double tol = key == "distance" ? 1e-4 : kRelTol;
    ASSERT_EQ(have.size(), want.size()) << name << "." << key;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(std::abs(have[i] - want[i]), tol * std::abs(want[i]) + 1e-12)
          << name << "." << key << " entry " << i + 1 << ": " << have[i] << " vs golden " << want[i];
  }
}

class GoldenCurves : public test::SuiteDirTest<GoldenCurves> {
 public:
  static void write_suite_files(const test::TempDir& dir) {
    res_ = test::write_sft_root(dir.file("sft_data"), /*train_runs=*/3, /*clips_per_run=*/4, /*n_drop=*/2);
    synth_root(test::wan_causal_root(dir.file("causal_data")));
    synth_root(test::h3_causal_root(dir.file("h3_data"), /*train_runs=*/3));
    SynthConfig sc;  // the learning pipeline's: clips of one 6-chunk span, 12 train and 8 val clips
    sc.out = dir.file("learning_data"), sc.latent_frames = 6, sc.train_runs = 3, sc.train_clips_per_run = 4;
    sc.val_runs = 2, sc.val_clips_per_run = 4, sc.n_drop = 0;
    synth_root(sc);
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
  c.init_lora = CausalConfig::kNoInitLora;
  const auto sum = train_causal(c);
  check_golden("causal_h3_df", curve(sum.losses, sum.grad_norms));
}

TEST_F(GoldenCurves, CausalTeacherForcing) {
  const auto sum = train_causal(causal_config("tf"));
  check_golden("causal_tf", curve(sum.losses, sum.grad_norms));
}

// benchmarks/distill_learning.sh in short: a bidirectional teacher (SFT from random weights, its semantic-map adapter
// kept off and dropped at export), a causal LoRA (diffusion forcing, frame 0 clean) on it, each sampled at 4 steps on
// the 8 val clips by `vdt sample`, and each set's distance to the data by `vdt eval` (frame 0 left out), beside the
// distance of the data's own 8 clips. The curves and distances are golden; the samples of models this short are
// farther from the data than the data's own clips.
TEST_F(GoldenCurves, LearningPipelineTeacherCausalAndTheirDistances) {
  const auto root = dir_->file("learning_data");
  auto sft = test::sft_test_run(root, "128x128", dir_->file("learning_teacher"), 10);
  sft.cond_dropout = 1, sft.cond_lr = 1e-12, sft.batch_size = 2, sft.save_every = 10;
  const auto teacher = train_sft(sft);
  const auto base = dir_->file("learning_base.safetensors");
  export_ckpt({{teacher.last_export}, "comfy", base, /*drop_adapter=*/true});
  auto causal = test::causal_test_run(root, dir_->file("learning_causal"), "", /*chunk_frames=*/1, 10);
  causal.random_init = false, causal.weights = base, causal.clean_first_frame = true, causal.val_clips = 8;
  causal.lr = 1e-3, causal.save_every = 10;
  const auto lora = train_causal(causal);
  auto distance = [&](const std::string& name, const std::string& args, const std::string& key) {
    const auto out = dir_->file("learning_s_" + name);
    const auto r = test::run_vdt("sample " + args + " --data_root " + root + " --out " + out +
                                 " --n 8 --steps 4 --cfg 3 --device cpu 2>&1");
    EXPECT_EQ(r.code, 0) << r.output;
    LatentEvalConfig e;
    e.generated = out, e.reference = root, e.skip_frames = 1, e.key = key;
    const auto rep = run_latent_eval(e);
    EXPECT_EQ(rep.n_generated, 8) << name;
    return rep.distance;
  };
  const double teacher_4 = distance("teacher", "--ckpt " + teacher.last_export, "conditioned");
  const double causal_4 = distance("causal", "--causal --lora " + lora.last_lora, "sample");
  LatentEvalConfig e;
  e.generated = dir_->file("learning_s_teacher"), e.reference = root, e.skip_frames = 1, e.key = "ground_truth";
  const double data = run_latent_eval(e).distance;
  EXPECT_LT(data, teacher_4);
  EXPECT_LT(data, causal_4);
  auto got = curve(teacher.losses, teacher.grad_norms);
  for (size_t i = 0; i < lora.losses.size(); ++i)
    got["loss"].push_back(lora.losses[i]), got["grad_norm"].push_back(lora.grad_norms[i]);
  got["distance"] = {teacher_4, causal_4, data};
  check_golden("learning", got);
}

}  // namespace
}  // namespace vdt
