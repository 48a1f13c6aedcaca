// Every flag the causal and MiniMax-H3 pages name (docs/causal.md, docs/h3.md, docs/data_format.md) exists in some
// `vdt` command's --help: a renamed or dropped flag fails here until the page follows the code. Flags of other tools
// the pages quote (torchrun's, DiffSynth's) are listed below by name.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "test_util.h"

namespace vdt {
namespace {

// Flags of other programs that the pages name on purpose (torchrun, DiffSynth, TensorBoard).
const std::set<std::string> kForeign = {"--nproc-per-node", "--no-python", "--silent-on-missing-audio", "--logdir"};

std::string dashed(std::string flag) {
  std::replace(flag.begin() + 2, flag.end(), '_', '-');
  return flag;
}

std::set<std::string> flags_in(const std::string& text) {
  static const std::regex flag("(^|[^A-Za-z0-9_-])(--[A-Za-z][A-Za-z0-9_-]*[A-Za-z0-9])");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), flag); it != std::sregex_iterator(); ++it)
    out.insert(dashed((*it)[2].str()));
  return out;
}

// Every flag of `vdt <command> --help` and of its subcommands, recursively.
void crawl(const std::string& command, std::set<std::string>& flags, int depth = 0) {
  const auto r = test::run_vdt(command + " --help");
  ASSERT_EQ(r.code, 0) << "vdt " << command << " --help:\n" << r.output;
  for (const auto& f : flags_in(r.output)) flags.insert(f);
  std::istringstream lines(r.output);
  bool in_subcommands = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("SUBCOMMANDS:", 0) == 0 || line.rfind("Subcommands:", 0) == 0) {
      in_subcommands = true;
      continue;
    }
    if (!in_subcommands) continue;
    std::smatch m;
    if (depth < 3 && std::regex_match(line, m, std::regex("^  ([a-z][a-z0-9-]*)\\b.*"))) {
      crawl(command + " " + m[1].str(), flags, depth + 1);
    } else if (!line.empty() && line[0] != ' ') {
      in_subcommands = false;
    }
  }
}

TEST(DocsFlags, EveryFlagTheCausalAndH3PagesNameExists) {
  std::set<std::string> known;
  crawl("", known);
  ASSERT_TRUE(known.count("--data-root") && known.count("--picture1")) << "the help crawl found too little";
  const auto repo = std::filesystem::path(VDT_TEST_ASSETS).parent_path().parent_path();
  for (const char* page : {"docs/causal.md", "docs/h3.md", "docs/data_format.md"}) {
    std::ifstream f(repo / page);
    ASSERT_TRUE(f) << repo / page;
    std::stringstream text;
    text << f.rdbuf();
    for (const auto& flag : flags_in(text.str())) {
      if (kForeign.count(flag)) continue;
      const bool negated = flag.rfind("--no-", 0) == 0 && known.count("--" + flag.substr(5));
      EXPECT_TRUE(known.count(flag) || negated) << page << " names " << flag << ", which no vdt command takes";
    }
  }
}

}  // namespace
}  // namespace vdt
