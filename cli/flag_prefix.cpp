// argparse's abbreviations for CLI11 (which has none): a long flag may be shortened to any unambiguous prefix of one
// of the subcommand's flags (`--max_step` = `--max_steps`), after '-' / '_' are made equal, as the Python trainers'
// argparse command lines do. An ambiguous prefix is an error listing the candidates, as argparse's. Repeated flags and
// the last-value rule are CLI11's (MultiOptionPolicy::TakeLast, set in main).
#include <algorithm>
#include <map>
#include <set>

#include "cli/commands.h"
#include "core/error.h"

namespace vdt::cli {
namespace {

std::string normalised(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

CLI::App* subcommand_named(CLI::App* app, const std::string& name) {
  const auto subs = app->get_subcommands([&](const CLI::App* s) { return s->check_name(name); });
  return subs.empty() ? nullptr : subs.front();
}

}  // namespace

std::vector<std::string> expand_flag_prefixes(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  CLI::App* current = &app;
  bool positional_only = false;
  for (const auto& arg : args) {
    if (positional_only || arg == "--" || arg.rfind("--", 0) != 0) {
      positional_only |= arg == "--";
      if (!positional_only && arg.rfind("-", 0) != 0)
        if (auto* sub = subcommand_named(current, arg)) current = sub;
      out.push_back(arg);
      continue;
    }
    const auto eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string rest = eq == std::string::npos ? "" : arg.substr(eq);
    const std::string key = normalised(name);
    // (option, negated name?) -> the first long name of that meaning that the prefix matches
    std::map<std::pair<const CLI::Option*, bool>, std::string> matches;
    bool exact = false;
    for (const CLI::Option* o : current->get_options()) {
      for (const auto& l : o->get_lnames()) {
        const std::string lk = normalised(l);
        if (lk == key) exact = true;
        if (lk.rfind(key, 0) == 0) matches.emplace(std::pair{o, lk.rfind("no_", 0) == 0}, l);
      }
    }
    if (exact || name.empty() || matches.empty()) {  // CLI11 takes it as given (or reports it unknown)
      out.push_back(arg);
      continue;
    }
    if (matches.size() > 1) {
      std::set<std::string> names;
      for (const auto& [k, l] : matches) names.insert("--" + l);
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      VDT_FAIL("ambiguous option: --", name, " could match ", list, "\n---> HINT: spell out more of the flag");
    }
    out.push_back("--" + matches.begin()->second + rest);
  }
  return out;
}

}  // namespace vdt::cli
