// StepTrace (VDT_TRACE): under several ranks each rank writes its own trace file, so torchrun's ranks do not
// overwrite one another's (a two-GPU memory trace is how the sharded H3 step's peak gets explained).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "test_util.h"
#include "train/loop/trace.h"

namespace vdt {
namespace {

TEST(StepTrace, RankFileTagsEveryRankOfSeveral) {
  EXPECT_EQ(rank_file("out/trace.json", 0, 1), "out/trace.json");
  EXPECT_EQ(rank_file("out/trace.json", 0, 2), "out/trace.rank0.json");
  EXPECT_EQ(rank_file("out/trace.json", 1, 2), "out/trace.rank1.json");
  EXPECT_EQ(rank_file("/a.b/trace", 3, 4), "/a.b/trace.rank3");  // a dot in a directory is no extension
  EXPECT_EQ(rank_file("out/.trace", 1, 2), "out/.trace.rank1");  // nor is a hidden file's leading dot
}

TEST(StepTrace, TwoRanksWriteTwoFiles) {
  test::TempDir dir;
  const test::EnvVar path("VDT_TRACE", dir.file("step.json")), step("VDT_TRACE_STEP", "2");
  for (int rank : {0, 1}) {
    StepTrace trace(rank, 2);
    for (int64_t s = 1; s <= 3; ++s) {
      trace.before_step(s);
      (torch::ones({8, 8}) * 2).sum();  // something to record
      trace.after_step(s);
    }
  }
  EXPECT_TRUE(std::filesystem::exists(dir.file("step.rank0.json")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step.rank1.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("step.json")));
}

}  // namespace
}  // namespace vdt
