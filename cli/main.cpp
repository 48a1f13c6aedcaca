// `vdt`: one binary, git-style subcommands. Parse -> the subcommand's callback (validate, print, build, run) inside
// one try/catch that prints the error and exits non-zero.
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/stop_signal.h"

namespace {

// CLI11 says "root is required" or "A subcommand is required" without the command; this names the (sub)command, each
// missing input with its help text, and a command line shape that works.
std::string missing_inputs(const CLI::App& app) {
  const CLI::App* cmd = &app;
  std::string path = "vdt";
  while (!cmd->get_subcommands().empty()) {
    cmd = cmd->get_subcommands().front();
    path += " " + cmd->get_name();
  }
  std::string out, usage = path;
  if (cmd->get_require_subcommand_min() > 0) {
    std::string names;
    for (const CLI::App* s : cmd->get_subcommands([](const CLI::App* sub) { return !sub->get_group().empty(); }))
      names += (names.empty() ? "" : ", ") + s->get_name();
    return path + ": a subcommand is required: " + names + "\n---> HINT: " + path + " --help says what each does";
  }
  for (const CLI::Option* o : cmd->get_options()) {
    if (!o->get_required() || o->count() > 0) continue;
    std::string name = o->get_name(), shape = name;
    if (!o->nonpositional()) {
      std::transform(name.begin(), name.end(), name.begin(), ::toupper);
      shape = name;
    } else {
      shape = name + " " + o->get_type_name();
    }
    out += (out.empty() ? "" : "\n") + path + ": " + name + " is required: " + o->get_description();
    usage += " " + shape;
  }
  if (out.empty()) return "";
  return out + "\n---> HINT: " + usage + " (" + path + " --help lists every flag)";
}

}  // namespace

int main(int argc, char** argv) {
  // Over a file-size limit (ulimit -f) a write fails with EFBIG instead of killing the process silently: the save
  // reports it like a full disk (the file, the OS error, the previous state intact).
  ::signal(SIGXFSZ, SIG_IGN);
  // A trainer stops on SIGTERM / SIGINT between steps and exits 0; from here on, a signal during start-up is held
  // for it too (it exits 0 before its first step) instead of killing the process with 143 / 130.
  std::optional<vdt::StopOnSignal> early_stop;
  if (argc > 1 && std::string(argv[1]) == "train") early_stop.emplace();
  CLI::App app{"vdt: training for conditioned video diffusion transformers (Wan, MiniMax-H3) on LibTorch"};
  app.require_subcommand(1);
  app.formatter(std::make_shared<vdt::cli::HelpFormatter>());
  app.footer("Every long flag takes '-' or '_' between its words (--data-root = --data_root).");
  app.set_version_flag("--version", std::string("vdt ") + vdt::build_commit());
  // argparse's rule for a repeated flag (wrapper scripts append overrides): the last value wins. Subcommands inherit
  // it.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  int exit_code = 0;
  vdt::cli::add_parity(app, exit_code);
  vdt::cli::add_bench(app, exit_code);
  vdt::cli::add_data(app, exit_code);
  vdt::cli::add_train(app, exit_code);
  vdt::cli::add_sample(app, exit_code);
  vdt::cli::add_eval(app, exit_code);
  vdt::cli::add_demo(app, exit_code);
  vdt::cli::add_ckpt(app, exit_code);
  vdt::cli::add_decode(app, exit_code);
  vdt::cli::add_env(app, exit_code);
  vdt::cli::add_flag_tables(app, exit_code);
  try {
    // argparse's abbreviations: unambiguous flag prefixes are spelled out before CLI11 parses.
    auto args = vdt::cli::expand_flag_prefixes(app, std::vector<std::string>(argv + 1, argv + argc));
    std::vector<char*> argv2 = {argv[0]};
    for (auto& a : args) argv2.push_back(a.data());
    app.parse(static_cast<int>(argv2.size()), argv2.data());
  } catch (const CLI::RequiredError& e) {
    const auto msg = missing_inputs(app);
    if (msg.empty()) return app.exit(e) == 0 ? 0 : 2;  // another rule (an option group, a count): CLI11's words
    std::cerr << "vdt: error: " << msg << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help); every usage error exits 2, as docs/cli.md says.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const vdt::Error& e) {
    std::cerr << "vdt: error: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "vdt: error: " << e.what_without_backtrace() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vdt: error: " << e.what() << "\n";
    return 2;
  }
  return exit_code;
}
