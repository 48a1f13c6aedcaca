// `vdt`: one binary, git-style subcommands. Parse -> the subcommand's callback (validate, print, build, run) inside
// one try/catch that prints the error and exits non-zero.
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"vdt: training for conditioned video diffusion transformers (Wan, MiniMax-H3) on LibTorch"};
  app.require_subcommand(1);
  app.formatter(std::make_shared<vdt::cli::HelpFormatter>());
  app.footer("Every long flag takes '-' or '_' between its words (--data-root = --data_root).");
  app.set_version_flag("--version", std::string("vdt ") + VDT_GIT);
  int exit_code = 0;
  vdt::cli::add_parity(app, exit_code);
  vdt::cli::add_bench(app, exit_code);
  vdt::cli::add_data(app, exit_code);
  vdt::cli::add_train(app, exit_code);
  vdt::cli::add_sample(app, exit_code);
  vdt::cli::add_demo(app, exit_code);
  vdt::cli::add_ckpt(app, exit_code);
  vdt::cli::add_decode(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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
