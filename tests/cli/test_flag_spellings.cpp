// Every long flag takes both spellings (wrapper scripts of the gc25d seed use --data_root, of rtcwm --data-root), and
// --help shows the real default of the switches that are on by default.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "test_util.h"

namespace vdt {
namespace {

TEST(Cli, EveryFlagTakesBothSpellings) {
  for (const std::string args :
       {"train sft --data-root /nonexistent_root --output /tmp/vdt_never --max-steps 1 --random_init",
        "train causal --data_root /nonexistent_root --out /tmp/vdt_never --save_every 2 "
        "--lora_rank 4 --random-init"}) {
    const auto r = test::run_vdt(args);
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.output.find("not expected"), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("/nonexistent_root"), std::string::npos) << args << "\n" << r.output;  // got to the data
  }
}

TEST(Cli, HelpShowsTheDefaultOfSwitchesThatAreOn) {
  const auto r = test::run_vdt("train sft --help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--first_frame_cond", "--gradient_checkpointing", "--save_state", "--val_uncond"}) {
    const auto at = r.output.find(flag);
    ASSERT_NE(at, std::string::npos) << flag;
    const auto line = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_NE(line.find("(default on)"), std::string::npos) << line;
    EXPECT_EQ(line.find("{false}"), std::string::npos) << line;
    EXPECT_NE(line.find(std::string("--no-") + (flag + 2)), std::string::npos) << line;
  }
}

// `vdt --version` names the commit the binary was built from (at build time, not when CMake configured the tree).
TEST(Version, NamesTheCommitOfTheBuild) {
  const std::filesystem::path repo = std::filesystem::path(VDT_TEST_ASSETS).parent_path().parent_path();
  std::string head;
  {
    FILE* p = popen(("git -C '" + repo.string() + "' rev-parse --short HEAD 2>/dev/null").c_str(), "r");
    char buf[64] = {};
    if (p && fgets(buf, sizeof buf, p)) head = buf;
    if (p) pclose(p);
  }
  while (!head.empty() && (head.back() == '\n' || head.back() == ' ')) head.pop_back();
  const auto r = test::run_vdt("--version");
  EXPECT_EQ(r.code, 0) << r.output;
  if (head.empty()) GTEST_SKIP() << "not a git checkout";
  // A binary linked before HEAD was committed names the commit it was built from: rebuild to test.
  long long committed = 0;
  if (FILE* p = popen(("git -C '" + repo.string() + "' log -1 --format=%ct 2>/dev/null").c_str(), "r")) {
    if (fscanf(p, "%lld", &committed) != 1) committed = 0;
    pclose(p);
  }
  const auto linked = std::chrono::duration_cast<std::chrono::seconds>(
      std::filesystem::last_write_time(VDT_BINARY).time_since_epoch() -
      std::filesystem::file_time_type::clock::now().time_since_epoch() +
      std::chrono::system_clock::now().time_since_epoch());
  if (linked.count() < committed)
    GTEST_SKIP() << VDT_BINARY << " was linked before HEAD (" << head << ") was committed";
  EXPECT_EQ(r.output.rfind("vdt " + head, 0), 0u) << r.output << " (HEAD " << head << ")";
}

}  // namespace
}  // namespace vdt
