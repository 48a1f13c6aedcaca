// `vdt eval` on files: sample files holding a data root's own latents are at distance 0 from the root, shifted ones at
// C·δ² (the distance grows with the shift), a root's longer clips are cut into windows of the generated length, and
// bad input (no files, a missing tensor, mixed shapes, another geometry) is an error naming the file and the fix.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "data/clip_io.h"
#include "data/data_root.h"
#include "test_util.h"
#include "tools/latent_eval.h"
#include "tools/synth.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

class LatentEval : public test::SuiteDirTest<LatentEval> {
 public:
  // A root of 10-latent clips (16 channels, 8x8): 8 train clips (1 dropped) and 4 val clips.
  static void write_suite_files(const test::TempDir& dir) {
    SynthConfig sc;
    sc.out = dir.file("root"), sc.latent_frames = 10, sc.train_runs = 2, sc.train_clips_per_run = 4, sc.n_drop = 1;
    synth_root(sc);
  }

 protected:
  // Writes every non-dropped clip of the root (frames [start, start + frames)) plus `shift` as a sample file under
  // `dir` with tensor `key`, as `vdt sample` names them; returns the number written.
  static int64_t write_samples(const std::string& dir, const std::string& key, double shift, int64_t frames,
                               int64_t start = 0) {
    fs::create_directories(dir);
    const auto root = DataRoot::open(dir_->file("root"));
    int64_t n = 0;
    for (const auto& row : root.rows()) {
      if (row.drop) continue;
      const auto x = read_latents(root.latent_path(row.clip_id), root.info(), frames, start).to(torch::kFloat32);
      save_safetensors(dir + "/" + row.clip_id + "_f0.safetensors", {{key, x + shift}, {"ground_truth", x}});
      ++n;
    }
    return n;
  }
  static LatentEvalConfig config(const std::string& generated) {
    LatentEvalConfig c;
    c.generated = generated, c.reference = dir_->file("root");
    return c;
  }
};

TEST_F(LatentEval, TheRootAgainstItselfIsAtZeroAndAShiftGrowsAsCDeltaSquared) {
  const auto same = dir_->file("same");
  const int64_t n = write_samples(same, "sample", 0.0, 10);
  const auto r = run_latent_eval(config(same));
  EXPECT_EQ(r.n_generated, n);
  EXPECT_EQ(r.n_reference, n);
  EXPECT_EQ(r.key, "sample");
  EXPECT_EQ(r.clip_shape, (std::vector<int64_t>{16, 10, 8, 8}));
  EXPECT_EQ(r.features, 3 * 16 + 9);
  EXPECT_NEAR(r.distance, 0.0, 1e-6);  // the files hold the bf16 latents in float32: the same values
  double last = 0;
  for (const double delta : {0.05, 0.1, 0.2}) {
    const auto dir = dir_->file("shift" + std::to_string(delta));
    write_samples(dir, "conditioned", delta, 10);  // the SFT sampler's key, found by --key auto
    const auto s = run_latent_eval(config(dir));
    EXPECT_EQ(s.key, "conditioned");
    EXPECT_NEAR(s.distance, 16 * delta * delta, 1e-6) << delta;
    EXPECT_GT(s.distance, last);
    last = s.distance;
    ASSERT_EQ(s.groups.size(), 2u);
    EXPECT_NEAR(s.groups[0].second, 16 * delta * delta, 1e-6);  // appearance
    EXPECT_NEAR(s.groups[1].second, 0.0, 1e-6);                 // motion: a shift does not move
  }
}

TEST_F(LatentEval, RootClipsAreCutIntoWindowsOfTheGeneratedLengthAndSkipFramesAppliesToBoth) {
  const auto dir = dir_->file("half");
  const int64_t n = write_samples(dir, "sample", 0.0, 5, /*start=*/5);
  auto c = config(dir);
  c.split = "train";
  c.out = dir_->file("half.json");
  const auto r = run_latent_eval(c);
  EXPECT_EQ(r.n_generated, n);
  EXPECT_EQ(r.n_reference, 2 * 7);  // 7 train clips kept, two 5-frame windows each
  EXPECT_EQ(r.clip_shape[1], 5);
  std::ifstream f(c.out);
  const auto j = nlohmann::json::parse(f);
  EXPECT_DOUBLE_EQ(j["frechet_distance"].get<double>(), r.distance);
  EXPECT_EQ(j["n_reference"].get<int64_t>(), 14);
  EXPECT_TRUE(j["groups"].contains("motion"));
  c.skip_frames = 2, c.out.clear();
  const auto s = run_latent_eval(c);
  EXPECT_EQ(s.clip_shape[1], 3);
  EXPECT_EQ(s.n_reference, 14);  // windows of 2 skipped + 3 kept frames: still two per 10-frame clip
}

TEST_F(LatentEval, ASampleDirectoryIsAReferenceThroughItsGroundTruth) {
  const auto dir = dir_->file("gt");
  write_samples(dir, "sample", 0.3, 10);
  auto c = config(dir);
  c.reference = dir;
  EXPECT_NEAR(run_latent_eval(c).distance, 16 * 0.09, 1e-6);  // sample = ground_truth + 0.3
}

TEST_F(LatentEval, BadInputIsAnErrorNamingTheFileAndTheFix) {
  const auto empty = dir_->file("empty");
  fs::create_directories(empty);
  test::expect_error([&] { run_latent_eval(config(empty)); }, {"--generated", empty, "no .safetensors", "vdt sample"});
  test::expect_error([&] { run_latent_eval(config(dir_->file("absent"))); }, {"--generated", "no such file"});
  const auto other = dir_->file("other_key");
  write_samples(other, "video", 0.0, 10);
  test::expect_error([&] { run_latent_eval(config(other)); },
                     {other, "no tensor sample or conditioned", "video", "--key"});
  const auto mixed = dir_->file("mixed");
  write_samples(mixed, "sample", 0.0, 10);
  save_safetensors(mixed + "/zz.safetensors", {{"sample", torch::zeros({16, 6, 8, 8})}});
  test::expect_error([&] { run_latent_eval(config(mixed)); },
                     {mixed + "/zz.safetensors", "[16, 6, 8, 8]", "one shape"});
  const auto wide = dir_->file("wide");
  fs::create_directories(wide);
  for (int i = 0; i < 3; ++i)
    save_safetensors(wide + "/c" + std::to_string(i) + ".safetensors", {{"sample", torch::randn({16, 5, 4, 4})}});
  test::expect_error([&] { run_latent_eval(config(wide)); }, {"--reference", "[16, 5, 8, 8]", "[16, 5, 4, 4]"});
  auto c = config(wide);
  c.split = "test";
  test::expect_error([&] { run_latent_eval(c); }, {"--split test", "all, train or val"});
  c = config(wide);
  c.skip_frames = 4;
  test::expect_error([&] { run_latent_eval(c); }, {"--skip-frames 4", "at least 6"});
}

TEST_F(LatentEval, TheCommandPrintsTheDistanceAndWritesJson) {
  const auto dir = dir_->file("cli");
  write_samples(dir, "sample", 0.1, 10);
  const auto out = dir_->file("cli.json");
  const auto r = test::run_vdt("eval --generated " + dir + " --reference " + dir_->file("root") + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("frechet_distance 0.16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("appearance"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(out));
  const auto bad = test::run_vdt("eval --reference " + dir_->file("root") + " 2>&1");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--generated"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace vdt
