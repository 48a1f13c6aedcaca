// Flag tables from the commands' declarations (flag_tables.h).
#include "tools/flag_tables.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "tools/plan_bench.h"
#include "tools/sample_config.h"
#include "tools/step_bench.h"
#include "train/causal/causal_config.h"
#include "train/sft/sft_config.h"

namespace vdt {
namespace {

constexpr const char* kOpen = "<!-- flags:";
constexpr const char* kClose = "<!-- /flags -->";

// Help text as a markdown table cell: '|' would end the cell, '<' open an HTML tag (<data_root>), '*' start emphasis.
std::string cell(const std::string& text) {
  std::string out;
  for (const char ch : text) out += ch == '|' ? "\\|" : ch == '<' ? "&lt;" : ch == '*' ? "\\*" : std::string(1, ch);
  return out;
}

// One command's table: flag | default | meaning, the defaults read from a default-constructed C (each command's own:
// the holder of a section may set its members' defaults); a required flag says so, a switch on / off, an empty string
// (empty), a number as Python's str() writes it; the meaning is the help.
template <class C>
std::string table_of(const std::vector<ConfigField<C>>& fields) {
  const C defaults{};
  std::string out = "| flag | default | meaning |\n|---|---|---|\n";
  for (const auto& f : fields) {
    std::string flag = "`" + f.flag + "`", value;
    if (f.negatable) flag += " / `--no-" + f.flag.substr(2) + "`";
    std::visit(
        [&](const auto& ref) {
          const auto& v = ref(defaults);
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) {
            value = v ? "on" : "off";
          } else if constexpr (std::is_same_v<V, std::string>) {
            value = v.empty() ? "(empty)" : "`" + v + "`";
          } else if constexpr (std::is_floating_point_v<V>) {
            value = py_float(v);
          } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
            value = "(none; repeatable)";
          } else {
            value = std::to_string(v);
          }
        },
        f.member);
    out += "| " + flag + " | " + (f.required ? "(required)" : value) + " | " + cell(f.help) + " |\n";
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

std::vector<std::string> flag_table_names() {
  return {"train-sft", "train-causal", "bench-step", "bench-plan", "sample"};
}

std::string command_flag_table(const std::string& name) {
  if (name == "train-sft") return table_of(SftConfig::fields());
  if (name == "train-causal") return table_of(CausalConfig::fields());
  if (name == "bench-step") return table_of(StepBenchConfig::fields());
  if (name == "bench-plan") return table_of(PlanBenchConfig::fields());
  if (name == "sample") return table_of(SampleConfig::fields());
  VDT_FAIL("no flag table '", name, "'; the tables are train-sft, train-causal, bench-step, bench-plan and sample");
}

std::string render_flag_tables(const std::string& page) {
  std::string out;
  size_t at = 0;
  for (size_t open; (open = page.find(kOpen, at)) != std::string::npos;) {
    const size_t name_end = page.find(" -->", open);
    const size_t body = page.find('\n', open);
    VDT_CHECK(name_end != std::string::npos && body != std::string::npos && name_end < body,
              "a flag table marker is "
              "not closed on its line: ",
              page.substr(open, page.find('\n', open) - open));
    const auto name = page.substr(open + std::string(kOpen).size(), name_end - open - std::string(kOpen).size());
    const size_t close = page.find(kClose, body);
    VDT_CHECK(close != std::string::npos, "the flag table ", name, " has no ", kClose, " line after it");
    out += page.substr(at, body + 1 - at) + command_flag_table(name);
    at = close;
  }
  return out + page.substr(at);
}

// A longest-common-subsequence diff: the pages' tables are a few hundred lines.
std::string line_diff(const std::string& have, const std::string& want) {
  const auto a = lines_of(have), b = lines_of(want);
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      ++i, ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out += "-" + std::to_string(i + 1) + ": " + a[i] + "\n", ++i;
    } else {
      out += "+" + std::to_string(j + 1) + ": " + b[j] + "\n", ++j;
    }
  }
  return out;
}

}  // namespace vdt
