// `vdt data check` and `vdt data inspect` end to end through the binary.
#include <gtest/gtest.h>

#include "data_test_util.h"

namespace vdt {
namespace {

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
  for (const char* s : {"res 832x480", "latent_hw [4, 4]", "train 5 clips (1 drop:true)  2 runs",
                        "val   3 clips (1 drop:true)  2 runs", "4 prompts x [4, 8]",
                        "latents [4, 3, 4, 4] BFloat16  ids [3, 8, 8] uint8"})
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
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 problem(s)"), std::string::npos) << r.output;
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
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--val-runs"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vdt
