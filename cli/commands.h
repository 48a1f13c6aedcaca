// One registration function per subcommand (each in its own file); main wires them into the `vdt` app.
// Each adds its flags with defaults and sets a callback that returns the process exit code through `exit_code`.
#pragma once
#include <CLI/CLI.hpp>

namespace vdt::cli {

void add_parity(CLI::App& app, int& exit_code);
void add_bench(CLI::App& app, int& exit_code);
void add_data(CLI::App& app, int& exit_code);
void add_train(CLI::App& app, int& exit_code);
void add_train_causal(CLI::App& train, int& exit_code);  // under `vdt train`
void add_sample(CLI::App& app, int& exit_code);
void add_demo(CLI::App& app, int& exit_code);
void add_ckpt(CLI::App& app, int& exit_code);
void add_data_synth(CLI::App& data_cmd, int& exit_code);  // cli/data_synth.cpp, called by add_data

}  // namespace vdt::cli
