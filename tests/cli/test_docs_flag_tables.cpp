// docs/cli.md's flag tables are the rendering of the flags' declarations (tools/flag_tables.h): a flag added, renamed,
// given another default or another help fails here, with the lines that differ, until the page is regenerated.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "tools/flag_tables.h"

namespace vdt {
namespace {

std::string read(const std::filesystem::path& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f) << path;
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

TEST(DocsFlagTables, CliPageHasTheDeclaredTables) {
  const auto repo = std::filesystem::path(VDT_TEST_ASSETS).parent_path().parent_path();
  const auto page = read(repo / "docs/cli.md");
  for (const auto& name : flag_table_names())
    EXPECT_NE(page.find("<!-- flags:" + name + " -->"), std::string::npos) << "docs/cli.md has no table " << name;
  const auto rendered = render_flag_tables(page);
  EXPECT_TRUE(rendered == page) << "docs/cli.md's flag tables differ from the declarations (-N: line N of the "
                                   "page, +N: line N of the rendering):\n"
                                << line_diff(page, rendered)
                                << "Regenerate them from the checkout: build/vdt flag-tables docs/cli.md";
}

// A marked block's body is replaced, the prose around it kept; rendering twice changes nothing; the rows carry each
// command's own defaults (the trainers differ in --precision, vdt bench step in --device).
TEST(DocsFlagTables, RenderingReplacesTheMarkedBlocksOnly) {
  const std::string page =
      "before\n<!-- flags:bench-step -->\n| stale |\n<!-- /flags -->\nbetween\n"
      "<!-- flags:train-causal -->\n<!-- /flags -->\nafter\n";
  const auto out = render_flag_tables(page);
  EXPECT_EQ(out.rfind("before\n<!-- flags:bench-step -->\n| flag | default | meaning |\n|---|---|---|\n", 0), 0u)
      << out;
  EXPECT_EQ(out.find("| stale |"), std::string::npos) << out;
  EXPECT_NE(out.find("<!-- /flags -->\nbetween\n<!-- flags:train-causal -->\n| flag |"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.size() - 22), "<!-- /flags -->\nafter\n") << out;
  EXPECT_EQ(render_flag_tables(out), out);
  EXPECT_NE(out.find("| `--device` | `cuda` |"), std::string::npos) << out;  // vdt bench step's
  EXPECT_NE(out.find("| `--precision` | `bf16` | bf16 (frozen bf16 base, float32 LoRA) or fp32 |"), std::string::npos)
      << out;
  EXPECT_NE(out.find("| `--out` | (required) |"), std::string::npos) << out;
  const auto sft = command_flag_table("train-sft");
  EXPECT_NE(sft.find("| `--precision` | `mixed` | mixed ("), std::string::npos) << sft;
  EXPECT_NE(sft.find("| `--save_state` / `--no-save_state` | on |"), std::string::npos) << sft;
  EXPECT_NE(sft.find("| `--lr` | 1e-05 |"), std::string::npos) << sft;
  test::expect_error([] { render_flag_tables("<!-- flags:train-dpo -->\n<!-- /flags -->\n"); },
                     {"train-dpo", "train-sft"});
  test::expect_error([] { render_flag_tables("<!-- flags:train-sft -->\n| row |\n"); },
                     {"train-sft", "<!-- /flags -->"});
}

TEST(DocsFlagTables, LineDiffNamesTheLinesThatDiffer) {
  EXPECT_EQ(line_diff("a\nb\nc\n", "a\nb\nc\n"), "");
  EXPECT_EQ(line_diff("a\nb\nc\n", "a\nB\nc\nd\n"), "-2: b\n+2: B\n+4: d\n");
}

}  // namespace
}  // namespace vdt
