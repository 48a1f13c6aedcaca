// `vdt data check` and `vdt data inspect` end to end through the binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "data/data_root.h"
#include "data/h3_root.h"
#include "data_test_util.h"
#include "test_util.h"
#include "tools/synth.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;
using test::run_vdt;
using test::TinyRoot;

TEST(DataCli, CheckHealthyRootSaysOk) {
  TinyRoot t;
  const auto r = run_vdt("data check " + t.root() + " --res 832x480");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ok: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("8 clips (train 5, val 3)"), std::string::npos) << r.output;
}

TEST(DataCli, CheckListsProblemsAndExitsOne) {
  TinyRoot t;
  std::filesystem::remove(t.cond("v1"));
  t.write_ids("t0", torch::full({3, 8, 8}, 30, torch::kByte));
  const auto r = run_vdt("data check " + t.root() + " --res 640x480");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(t.cond("v1") + ": missing cond file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(t.cond("t0") + ": frame 0 has id 30"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("res is 832x480, expected 640x480"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 problem(s)"), std::string::npos) << r.output;
}

TEST(DataCli, InspectSummarisesRoot) {
  TinyRoot t;
  const auto r = run_vdt("data inspect " + t.root());
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* s :
       {"res 832x480", "latent_hw [4, 4]", "train 5 clips (1 drop:true)  2 runs", "val   3 clips (1 drop:true)  2 runs",
        "4 prompts x [4, 8]", "latents [4, 3, 4, 4] BFloat16  ids [3, 8, 8] uint8"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.output;
}

// One prompt per clip on a 3-frame root: `data check` applies the SFT trainer's rule (one prompt per latent frame)
// instead of passing a root the trainer cannot train on.
TEST(DataCli, CheckAppliesTheTrainersPromptsPerLatentFrameRule) {
  TinyRoot t;
  t.info()["cells"] = 1;
  t.write_dataset_json();
  for (auto& c : t.clips()) c.cells.resize(1);
  t.write_index();
  const auto r = run_vdt("data check " + t.root());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(t.file("dataset.json") + ": cells = 1 prompts per clip but latent_frames = 3"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1 problem(s)"), std::string::npos) << r.output;
}

// An H3 root's picture1_2048 is Picture 1 at dataset.json's picture1_short_edge on its short edge (DiffSynth's
// ref_image_short_edge, both sides to the nearest multiple of 32 pixels): `vdt data check` holds every clip to it.
TEST(DataCli, CheckHoldsPicture2048ToTheRootsShortEdge) {
  EXPECT_EQ(picture1_short_edge_size(30, 52, 2048),
            (std::pair<int64_t, int64_t>{128, 222}));  // 480x832 -> 2048x3552 px: 7104 rows
  EXPECT_EQ(picture1_short_edge_size(52, 30, 2048), (std::pair<int64_t, int64_t>{222, 128}));
  EXPECT_EQ(picture1_short_edge_size(4, 6, 128), (std::pair<int64_t, int64_t>{8, 12}));
  test::TempDir d;
  SynthConfig sc;
  sc.out = d.file("h3"), sc.model = "h3", sc.latent_channels = 24, sc.text_dim = 48, sc.latent_frames = 12;
  sc.latent_h = 4, sc.latent_w = 6, sc.train_runs = 2, sc.train_clips_per_run = 1, sc.val_runs = 1, sc.n_drop = 0;
  synth_root(sc);
  EXPECT_TRUE(check_root(sc.out).empty());
  const std::string ds = sc.out + "/dataset.json";
  auto j = nlohmann::json::parse(std::ifstream(ds));
  EXPECT_EQ(j["picture1_short_edge"], 128);
  j["picture1_short_edge"] = 256;  // what the stored latents are not
  std::ofstream(ds) << j.dump();
  auto problems = check_root(sc.out);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("'picture1_2048' is 8x12"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("picture1_short_edge 256 gives 16x24"), std::string::npos) << problems[0];
  j.erase("picture1_short_edge");  // a root of the long-edge prepare
  std::ofstream(ds) << j.dump();
  problems = check_root(sc.out);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("records no picture1_short_edge"), std::string::npos) << problems[0];
}

// DiffSynth's H3 reference-image size (docs/h3_model.md §2): the whole image scaled to 2048 on its short edge, each
// side the nearest multiple of 32. A 1920x1080 Picture 1 is 3648x2048, not the 3712x2048 a crop to 1920x1056 first
// would give. A latent file recording its source size (picture1_source_size, WxH) is held to the size that gives.
TEST(DataCli, Picture2048FollowsDiffSynthsShapeOfTheUncroppedImage) {
  using HW = std::pair<int64_t, int64_t>;
  EXPECT_EQ(short_edge_pixels(1080, 1920, 2048), (HW{2048, 3648}));  // 1920x1080 (W x H)
  EXPECT_EQ(short_edge_pixels(1920, 1080, 2048), (HW{3648, 2048}));  // 1080x1920
  EXPECT_EQ(short_edge_pixels(1056, 1920, 2048), (HW{2048, 3712}));  // what cropping to multiples of 32 first gave
  EXPECT_EQ(short_edge_pixels(480, 832, 2048), (HW{2048, 3552}));
  test::TempDir d;
  SynthConfig sc;
  sc.out = d.file("h3"), sc.model = "h3", sc.latent_channels = 24, sc.text_dim = 48, sc.latent_frames = 12;
  sc.latent_h = 4, sc.latent_w = 6, sc.train_runs = 2, sc.train_clips_per_run = 1, sc.val_runs = 1, sc.n_drop = 0;
  synth_root(sc);
  // Every clip's Picture 1 from a 120x70 source: native 96x64 (latent 4x6) after the crop; at a 128 short edge the
  // whole image is 128x219.4 -> 224 wide (latent 8x14), the cropped one would be 8x12.
  auto rewrite = [&](int64_t wp, const Metadata& meta) {
    for (const auto& e : fs::directory_iterator(sc.out + "/latents")) {
      const std::string lat = e.path().string();
      auto f = SafetensorsFile::open(lat);
      NamedTensors t = {{"latents", f->get("latents").clone()},
                        {"picture1", f->get("picture1").clone()},
                        {"picture1_2048", torch::zeros({24, 1, 8, wp}, torch::kBFloat16)}};
      f.reset();
      save_safetensors(lat, t, meta);
    }
  };
  rewrite(14, {{"picture1_source_size", "120x70"}});
  EXPECT_TRUE(check_root(sc.out).empty());
  rewrite(12, {{"picture1_source_size", "120x70"}});
  auto problems = check_root(sc.out);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("its source image (120x70 pixels)"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("gives 8x14"), std::string::npos) << problems[0];
  rewrite(14, {{"picture1_source_size", "120 by 70"}});
  problems = check_root(sc.out);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("picture1_source_size '120 by 70' is not WxH"), std::string::npos) << problems[0];
}

// A root whose clips are all validation clips passes every per-file check, but the trainers would have nothing to
// train on: `data check` says so and names the flags that choose the validation clips.
TEST(DataCli, CheckRefusesARootWithoutTrainingClips) {
  TinyRoot t;
  for (auto& c : t.clips()) c.split = "val";
  t.write_index();
  const auto r = run_vdt("data check " + t.root());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(t.file("index/clips.jsonl") + ": no training clips: all 8 clips are split \"val\""),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--val-runs"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vdt
