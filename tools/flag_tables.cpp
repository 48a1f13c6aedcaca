// Flag tables and stated defaults from the commands' declarations (flag_tables.h).
#include "tools/flag_tables.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "tools/ckpt.h"
#include "tools/ckpt_export.h"
#include "tools/command_args.h"
#include "tools/kernel_bench.h"
#include "tools/parity.h"
#include "tools/latent_eval.h"
#include "tools/plan_bench.h"
#include "tools/sample_bench.h"
#include "tools/sample_config.h"
#include "tools/step_bench.h"
#include "tools/synth.h"
#include "train/causal/causal_config.h"
#include "train/distill/distill_config.h"
#include "train/sft/sft_config.h"

namespace vdt {
namespace {

constexpr const char* kOpen = "<!-- flags:";
constexpr const char* kClose = "<!-- /flags -->";
constexpr const char* kDefaultOpen = "<!-- default:";
constexpr const char* kDefaultClose = "<!-- /default -->";

// Help text as a markdown table cell: '|' would end the cell, '<' open an HTML tag (<data_root>), '*' start emphasis.
std::string cell(const std::string& text) {
  std::string out;
  for (const char ch : text) out += ch == '|' ? "\\|" : ch == '<' ? "&lt;" : ch == '*' ? "\\*" : std::string(1, ch);
  return out;
}

struct Row {
  std::string flag;   // as declared: "--lr", "files"
  std::string shown;  // its table cell: "`--save_state` / `--no-save_state`", "`files` (argument)"
  std::string value;  // its default as shown: "on", "`auto`", "1e-05", "(empty)", "(required)"
  std::string help;
};

// A command's rows: the defaults read from a default-constructed C (each command's own: the holder of a section may
// set its members' defaults); a required flag says so, a switch on / off, an empty string or list (empty), a number as
// Python's str() writes it, a list its values; the meaning is the help.
template <class C>
std::vector<Row> rows_of(const std::vector<ConfigField<C>>& fields) {
  const C defaults{};
  std::vector<Row> out;
  for (const auto& f : fields) {
    Row r{f.flag, "`" + f.flag + "`", "", f.help};
    if (f.negatable) r.shown += " / `--no-" + f.flag.substr(2) + "`";
    if (f.positional()) r.shown += " (argument)";
    std::visit(
        [&](const auto& ref) {
          const auto& v = ref(defaults);
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) {
            r.value = v ? "on" : "off";
          } else if constexpr (std::is_same_v<V, std::string>) {
            r.value = v.empty() ? "(empty)" : "`" + v + "`";
          } else if constexpr (is_list_v<V>) {
            std::string joined;
            for (const auto& x : v) {
              if (!joined.empty()) joined += ' ';
              if constexpr (std::is_same_v<V, std::vector<std::string>>) {
                joined += x;
              } else {
                joined += std::to_string(x);
              }
            }
            r.value = v.empty() ? "(empty)" : "`" + joined + "`";
          } else if constexpr (std::is_floating_point_v<V>) {
            r.value = py_float(v);
          } else {
            r.value = std::to_string(v);
          }
        },
        f.member);
    if (f.required) r.value = "(required)";
    out.push_back(r);
  }
  return out;
}

struct Command {
  const char* name;
  const char* words;  // the command line after `vdt`
  std::function<std::vector<Row>()> rows;
};

const std::vector<Command>& commands() {
  static const std::vector<Command> c = {
      {"train-sft", "train sft", [] { return rows_of(SftConfig::fields()); }},
      {"train-causal", "train causal", [] { return rows_of(CausalConfig::fields()); }},
      {"train-distill", "train distill", [] { return rows_of(DistillConfig::fields()); }},
      {"bench-step", "bench step", [] { return rows_of(StepBenchConfig::fields()); }},
      {"bench-plan", "bench plan", [] { return rows_of(PlanBenchConfig::fields()); }},
      {"bench-sample", "bench sample", [] { return rows_of(SampleBenchConfig::fields()); }},
      {"bench-kernels", "bench kernels", [] { return rows_of(KernelBenchConfig::fields()); }},
      {"data-check", "data check", [] { return rows_of(DataCheckArgs::fields()); }},
      {"data-inspect", "data inspect", [] { return rows_of(DataInspectArgs::fields()); }},
      {"data-synth", "data synth", [] { return rows_of(SynthConfig::fields()); }},
      {"ckpt-inspect", "ckpt inspect", [] { return rows_of(CkptFilesArgs::fields()); }},
      {"ckpt-check", "ckpt check", [] { return rows_of(CkptCheckArgs::fields()); }},
      {"ckpt-diff", "ckpt diff", [] { return rows_of(CkptDiffArgs::fields()); }},
      {"ckpt-merge-lora", "ckpt merge-lora", [] { return rows_of(MergeLoraArgs::fields()); }},
      {"ckpt-quantize-base", "ckpt quantize-base", [] { return rows_of(QuantizeBaseArgs::fields()); }},
      {"ckpt-export", "ckpt export", [] { return rows_of(ExportConfig::fields()); }},
      {"parity", "parity", [] { return rows_of(ParityConfig::fields()); }},
      {"demo", "demo", [] { return rows_of(DemoArgs::fields()); }},
      {"env", "env", [] { return rows_of(EnvArgs::fields()); }},
      {"eval", "eval", [] { return rows_of(LatentEvalConfig::fields()); }},
      {"sample", "sample", [] { return rows_of(SampleConfig::fields()); }},
  };
  return c;
}

const Command& command(const std::string& name) {
  for (const auto& c : commands())
    if (c.name == name) return c;
  std::string known;
  for (const auto& c : commands()) known += std::string(known.empty() ? "" : ", ") + c.name;
  VDT_FAIL("no flag table '", name, "'; the tables are ", known);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// `page` with each `<!-- default:NAME --flag -->VALUE<!-- /default -->` given the declared default.
std::string render_defaults(const std::string& page) {
  std::string out;
  size_t at = 0;
  for (size_t open; (open = page.find(kDefaultOpen, at)) != std::string::npos;) {
    const size_t head_end = page.find(" -->", open);
    const size_t line_end = page.find('\n', open);
    VDT_CHECK(head_end != std::string::npos && head_end < line_end,
              "a stated default's marker is not closed on its line: ", page.substr(open, line_end - open));
    const std::string head =
        page.substr(open + std::string(kDefaultOpen).size(), head_end - open - std::string(kDefaultOpen).size());
    const size_t space = head.find(' ');
    VDT_CHECK(space != std::string::npos,
              "a stated default names a table and a flag: <!-- default:NAME --flag -->, got ", head);
    const size_t close = page.find(kDefaultClose, head_end);
    VDT_CHECK(close != std::string::npos && close < page.find('\n', head_end), "the stated default ", head, " has no ",
              kDefaultClose, " on its line");
    out += page.substr(at, head_end + 4 - at) + command_flag_default(head.substr(0, space), head.substr(space + 1));
    at = close;
  }
  return out + page.substr(at);
}

}  // namespace

std::vector<std::string> flag_table_names() {
  std::vector<std::string> out;
  for (const auto& c : commands()) out.push_back(c.name);
  return out;
}

std::string flag_table_command(const std::string& name) { return command(name).words; }

std::vector<std::string> flag_table_flags(const std::string& name) {
  std::vector<std::string> out;
  for (const auto& r : command(name).rows()) out.push_back(r.flag);
  return out;
}

std::string command_flag_table(const std::string& name) {
  std::string out = "| flag | default | meaning |\n|---|---|---|\n";
  for (const auto& r : command(name).rows()) out += "| " + r.shown + " | " + r.value + " | " + cell(r.help) + " |\n";
  return out;
}

std::string command_flag_default(const std::string& name, const std::string& flag) {
  for (const auto& r : command(name).rows())
    if (r.flag == flag) return r.value;
  VDT_FAIL("the flag table ", name, " (vdt ", command(name).words, ") has no flag ", flag);
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
  return render_defaults(out + page.substr(at));
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
