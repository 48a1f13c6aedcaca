// docs/cli.md's flag tables and the defaults the docs state are the rendering of the flags' declarations
// (tools/flag_tables.h): a flag added, renamed, given another default or another help fails here, with the lines that
// differ, until the pages are regenerated; every command binds exactly its declared flags (nothing added by hand), and
// every command `vdt --help` lists has its table.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
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

std::filesystem::path repo() { return std::filesystem::path(VDT_TEST_ASSETS).parent_path().parent_path(); }

// Every page that may hold a table or a stated default: the README and docs/*.md.
std::vector<std::filesystem::path> pages() {
  std::vector<std::filesystem::path> out = {repo() / "README.md"};
  for (const auto& e : std::filesystem::directory_iterator(repo() / "docs"))
    if (e.path().extension() == ".md") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(DocsFlagTables, CliPageHasTheDeclaredTables) {
  const auto page = read(repo() / "docs/cli.md");
  for (const auto& name : flag_table_names())
    EXPECT_NE(page.find("<!-- flags:" + name + " -->"), std::string::npos) << "docs/cli.md has no table " << name;
  for (const auto& path : pages()) {
    const auto text = read(path);
    const auto rendered = render_flag_tables(text);
    EXPECT_TRUE(rendered == text) << path.filename().string()
                                  << ": its flag tables or stated defaults differ from the declarations (-N: line N "
                                     "of the page, +N: line N of the rendering):\n"
                                  << line_diff(text, rendered)
                                  << "Regenerate them from the checkout: build/vdt flag-tables docs/*.md README.md";
  }
}

// The flags `vdt <command> --help` lists ("--data_root", positional names), '_' written '-'; --help left out.
std::set<std::string> help_flags(const std::string& words) {
  const auto r = test::run_vdt(words + " --help");
  EXPECT_EQ(r.code, 0) << words << "\n" << r.output;
  std::set<std::string> out;
  std::istringstream in(r.output);
  bool positionals = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Positionals:", 0) == 0) positionals = true;
    if (line.rfind("Options:", 0) == 0 || line.rfind("Subcommands:", 0) == 0) positionals = false;
    std::smatch m;
    if (positionals && std::regex_search(line, m, std::regex("^  ([a-z][a-z0-9_]*) "))) out.insert(m[1]);
    if (line.rfind("  -", 0) != 0) continue;  // an option line; its wrapped help is indented further
    const std::string names = line.substr(0, line.find("  ", line.find_first_not_of(' ')));
    static const std::regex flag("--[a-z0-9_-]+");
    for (std::sregex_iterator it(names.begin(), names.end(), flag), end; it != end; ++it) {
      std::string f = it->str();
      std::replace(f.begin(), f.end(), '_', '-');
      if (f != "--help") out.insert(f);
    }
  }
  return out;
}

// Each command binds exactly the fields its table lists: a flag added by hand beside them would be missing here.
TEST(DocsFlagTables, EveryCommandBindsItsDeclaredFlags) {
  for (const auto& name : flag_table_names()) {
    std::set<std::string> declared;
    for (auto f : flag_table_flags(name)) {
      std::replace(f.begin(), f.end(), '_', '-');
      declared.insert(f);
    }
    auto listed = help_flags(flag_table_command(name));
    for (auto it = listed.begin(); it != listed.end();)  // --no-<flag> of a negatable switch
      it = it->rfind("--no-", 0) == 0 && declared.count("--" + it->substr(5)) ? listed.erase(it) : std::next(it);
    EXPECT_EQ(listed, declared) << "vdt " << flag_table_command(name) << " binds other flags than its table " << name
                                << " lists";
  }
}

// The subcommands a command's --help lists.
std::vector<std::string> subcommands(const std::string& words) {
  const auto r = test::run_vdt(words + " --help");
  std::vector<std::string> out;
  std::istringstream in(r.output);
  bool in_list = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_list = true;
      continue;
    }
    std::smatch m;
    if (in_list && std::regex_search(line, m, std::regex("^  ([a-z][a-z0-9-]*)( |$)"))) out.push_back(m[1]);
    if (in_list && !line.empty() && line[0] != ' ') in_list = false;
  }
  return out;
}

// Every command has its table, but those whose flags another program parses (`data prepare`, `decode`: the Python
// package's argparse, docs/python.md).
TEST(DocsFlagTables, EveryCommandHasATable) {
  const std::set<std::string> elsewhere = {"data prepare", "decode"};
  std::set<std::string> tabled;
  for (const auto& name : flag_table_names()) tabled.insert(flag_table_command(name));
  int seen = 0;
  for (const auto& top : subcommands("")) {
    const auto subs = elsewhere.count(top) ? std::vector<std::string>{} : subcommands(top);
    for (const auto& words : subs.empty() ? std::vector<std::string>{top} : subs) {
      const std::string cmd = subs.empty() ? words : top + " " + words;
      ++seen;
      EXPECT_TRUE(elsewhere.count(cmd) || tabled.count(cmd)) << "vdt " << cmd << " has no flag table";
    }
  }
  EXPECT_GE(seen, 18) << "the subcommand lists were not read: is the help's layout another?";
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

// A default stated in prose is rewritten from the declaration; the rest of the line stays.
TEST(DocsFlagTables, StatedDefaultsAreRendered) {
  const std::string page =
      "`--chunks` (<!-- default:bench-sample --chunks -->8<!-- /default -->), `--model` "
      "(<!-- default:bench-step --model --><!-- /default -->) and `--seed` "
      "<!-- default:data-synth --seed -->x<!-- /default -->.\n";
  EXPECT_EQ(render_flag_tables(page),
            "`--chunks` (<!-- default:bench-sample --chunks -->12<!-- /default -->), `--model` "
            "(<!-- default:bench-step --model -->`wan2.2-ti2v-5b`<!-- /default -->) and `--seed` "
            "<!-- default:data-synth --seed -->0<!-- /default -->.\n");
  EXPECT_EQ(command_flag_default("ckpt-export", "--format"), "(required)");
  EXPECT_EQ(command_flag_default("train-sft", "--save_state"), "on");
  test::expect_error([] { render_flag_tables("<!-- default:bench-sample --chunkz -->1<!-- /default -->\n"); },
                     {"bench-sample", "--chunkz"});
  test::expect_error([] { render_flag_tables("<!-- default:bench-sample --chunks -->1\n"); },
                     {"bench-sample --chunks", "<!-- /default -->"});
  test::expect_error([] { render_flag_tables("<!-- default:bench-sample -->1<!-- /default -->\n"); }, {"NAME --flag"});
}

// A default stated without the markers ("`--fp8` (default `off`", "`--level-shift` (default 3") must still be one a
// command declares for that flag: a changed default fails here until the prose follows (or carries the markers). Flags
// no table declares (the Python package's) are not checked.
TEST(DocsFlagTables, UnmarkedStatedDefaultsAreDeclaredOnes) {
  std::map<std::string, std::set<std::string>> declared;  // flag ('_' as '-') -> defaults as tables show them
  for (const auto& name : flag_table_names())
    for (auto f : flag_table_flags(name)) {
      auto value = command_flag_default(name, f);
      std::replace(f.begin(), f.end(), '_', '-');
      value.erase(std::remove(value.begin(), value.end(), '`'), value.end());
      declared[f].insert(value);
    }
  const auto same = [](const std::string& a, const std::string& b) {
    if (a == b) return true;
    char* end_a = nullptr;
    char* end_b = nullptr;
    const double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
    return !a.empty() && !b.empty() && *end_a == 0 && *end_b == 0 && x == y;
  };
  // per line (std::regex recurses per character: whole pages would be deep)
  const std::regex stated(
      "`(--[a-z0-9_-]+)[^`]*`[^`.;]{0,60}?\\bdefaults?(?: to| is)?:? "
      "(?:`([^`]+)`|([0-9][0-9.e+-]*|on|off|auto|none)\\b)");
  // the text outside the generated parts (tables, marked defaults) and code blocks
  const auto without = [](std::string text, const std::string& open, const std::string& close) {
    for (size_t at; (at = text.find(open)) != std::string::npos;) {
      const size_t end = text.find(close, at + open.size());
      text.erase(at, end == std::string::npos ? std::string::npos : end + close.size() - at);
    }
    return text;
  };
  int checked = 0;
  for (const auto& path : pages()) {
    auto text =
        without(without(without(read(path), "<!-- flags:", "<!-- /flags -->"), "<!-- default:", "<!-- /default -->"),
                "```", "```");
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      for (std::sregex_iterator it(line.begin(), line.end(), stated), end; it != end; ++it) {
        std::string flag = (*it)[1];
        std::replace(flag.begin(), flag.end(), '_', '-');
        const std::string value = (*it)[2].matched ? (*it)[2].str() : (*it)[3].str();
        if (!declared.count(flag)) continue;
        ++checked;
        bool ok = false;
        for (const auto& d : declared[flag]) ok = ok || same(d, value);
        std::string all;
        for (const auto& d : declared[flag]) all += (all.empty() ? "" : ", ") + d;
        EXPECT_TRUE(ok) << path.filename().string() << ": \"" << it->str() << "\" states " << flag << "'s default as "
                        << value << "; the commands declare " << all
                        << " (state it with the markers: docs/cli.md \"Flags, once\")";
      }
  }
  EXPECT_GT(checked, 0) << "no stated default found: is the pattern broken?";
}

// --device, --seed, --model and --precision: one declaration each, bound by every command that takes them.
TEST(DocsFlagTables, SharedFlagsHaveOneMeaning) {
  std::map<std::string, std::set<std::string>> helps;
  for (const auto& name : flag_table_names()) {
    std::istringstream in(command_flag_table(name));
    for (std::string line; std::getline(in, line);)
      for (const char* flag : {"--device", "--seed"})
        if (line.rfind(std::string("| `") + flag + "` |", 0) == 0)
          helps[flag].insert(line.substr(line.find(" | ", line.find(" | ") + 3) + 3));
  }
  for (const char* flag : {"--device", "--seed"}) EXPECT_EQ(helps[flag].size(), 1u) << flag;
  for (const auto& name :
       {"train-sft", "train-causal", "bench-step", "bench-plan", "bench-sample", "data-synth", "ckpt-check"})
    EXPECT_NE(command_flag_table(name).find("| `--model` | "), std::string::npos) << name;
  EXPECT_NE(command_flag_table("bench-sample").find("base model preset: "), std::string::npos);
}

TEST(DocsFlagTables, LineDiffNamesTheLinesThatDiffer) {
  EXPECT_EQ(line_diff("a\nb\nc\n", "a\nb\nc\n"), "");
  EXPECT_EQ(line_diff("a\nb\nc\n", "a\nB\nc\nd\n"), "-2: b\n+2: B\n+4: d\n");
}

}  // namespace
}  // namespace vdt
