// Every vdt command that has a required input says, when it is missing, which command it is, what the input is and a
// command line that works: walks `vdt --help` and its subcommands' help (so a new command is covered without editing
// this test) and runs each one whose help marks an input REQUIRED with nothing given.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "test_util.h"

namespace vdt {
namespace {

// The subcommands listed in a CLI11 help text ("Subcommands:" then "  name   description" lines).
std::vector<std::string> subcommands_of(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream in(help);
  bool section = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ') {
      section = line.rfind("Subcommands:", 0) == 0;
      continue;
    }
    std::smatch m;
    if (section && std::regex_match(line, m, std::regex(R"(\s+([a-z][a-z0-9-]*)\s.*)"))) out.push_back(m[1]);
  }
  return out;
}

void walk(const std::string& path, std::vector<std::string>& required, int& commands) {
  const auto help = test::run_vdt(path + " --help");
  ASSERT_EQ(help.code, 0) << path << ":\n" << help.output;
  ++commands;
  const auto subs = subcommands_of(help.output);
  for (const auto& s : subs) walk(path.empty() ? s : path + " " + s, required, commands);
  if (subs.empty() && help.output.find("REQUIRED") != std::string::npos) required.push_back(path);
}

TEST(RequiredInputs, EveryMissingInputIsNamedWithACommandLineThatWorks) {
  std::vector<std::string> required;
  int commands = 0;
  walk("", required, commands);
  EXPECT_GT(commands, 15);
  EXPECT_GE(required.size(), 10u);
  for (const auto& path : required) {
    const auto r = test::run_vdt(path);
    EXPECT_EQ(r.code, 2) << "vdt " << path << ":\n" << r.output;
    EXPECT_NE(r.output.find("vdt: error: vdt " + path + ": "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" is required: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("---> HINT: vdt " + path + " "), std::string::npos) << r.output;
  }
}

TEST(RequiredInputs, PositionalsAndSubcommandsAreSpelledOut) {
  auto r = test::run_vdt("ckpt diff");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("vdt ckpt diff: A is required: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("---> HINT: vdt ckpt diff A B"), std::string::npos) << r.output;
  r = test::run_vdt("data check");
  EXPECT_NE(r.output.find("vdt data check: ROOT is required: data root"), std::string::npos) << r.output;
  r = test::run_vdt("train sft --output /nonexistent/run");
  EXPECT_NE(r.output.find("vdt train sft: --data_root is required"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--output is required"), std::string::npos) << r.output;
  r = test::run_vdt("data");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("vdt data: a subcommand is required: check, inspect, synth, prepare"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace vdt
