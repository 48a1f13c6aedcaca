// One registration function per subcommand (each in its own file); main wires them into the `vdt` app.
// Each adds its flags with defaults and sets a callback that returns the process exit code through `exit_code`.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <set>
#include <string>

#include "distributed/communicator.h"
#include "train/loop/config_fields.h"

namespace vdt {
// The checkout's commit when this binary was built ("+dirty" with uncommitted changes; build/generated/).
const char* build_commit();
}  // namespace vdt

namespace vdt::cli {

// Both spellings of every long flag name in a CLI11 names list: "--data_root" -> "--data_root,--data-root" (and
// "--data-root" -> both; "!--no-x_y" too), so wrapper scripts of either seed run unchanged. Names without '_' or
// '-' after the leading dashes are kept as given.
std::string spellings(const std::string& names);

// "(default on)" / "(default off)": what --help shows beside a switch.
inline std::string default_of(bool on) { return on ? "(default on)" : "(default off)"; }

// --help names each flag once per meaning: "--first_frame_cond, --no-first_frame_cond" instead of CLI11's five
// spellings with their "{false}" value tags (the app's footer says that '-' and '_' are interchangeable).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
};

// Binds every declared field of a config as a flag (train/loop/config_fields.h): both spellings, required flags,
// --no-<flag> for switches that are on by default, --help with the real default; a field named without dashes as a
// positional argument.
template <class C>
void bind_fields(CLI::App* app, const std::shared_ptr<C>& c, const std::vector<ConfigField<C>>& fields) {
  for (const auto& f : fields)
    std::visit(
        [&](const auto& ref) {
          auto& v = ref(*c);
          using V = std::decay_t<decltype(v)>;
          CLI::Option* o = nullptr;
          if constexpr (std::is_same_v<V, bool>) {
            o = app->add_flag(spellings(f.negatable ? f.flag + ",!--no-" + f.flag.substr(2) : f.flag), v, f.help)
                    ->option_text(default_of(v));
          } else {
            o = app->add_option(f.positional() ? f.flag : spellings(f.flag), v, f.help);
            if constexpr (is_list_v<V>) {
              if (f.values > 0) o->expected(f.values);
            }
            if constexpr (std::is_same_v<V, uint64_t>)  // CLI11 would wrap "-1" to 2^64 - 1; argparse has no unsigned
              o->check(CLI::Validator(
                  [](std::string& s) {
                    return s.rfind('-', 0) == 0 ? s + " is negative; expected an integer >= 0" : std::string();
                  },
                  "INT>=0"));
            if constexpr (std::is_same_v<V, std::string> || is_list_v<V>) {
              if (!v.empty()) o->capture_default_str();
            } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
              o->expected(1);  // repeatable: each --flag takes one value
            } else {
              o->capture_default_str();
            }
          }
          if (f.required) o->required();
        },
        f.member);
}

// The flags of `fields` that this command line gave (either spelling, --no-<flag> too), after parsing: what the memory
// plan keeps (train/loop/config_sections.h MemorySection::given).
template <class C>
std::set<std::string> given_flags(const CLI::App& app, const std::vector<ConfigField<C>>& fields) {
  std::set<std::string> out;
  for (const auto& f : fields)
    if (const auto* o = app.get_option_no_throw(f.flag); o != nullptr && o->count() > 0) out.insert(f.flag);
  return out;
}

// argv after the program name with every abbreviated long flag spelled out, as argparse accepts them: an
// unambiguous prefix of one of the (sub)command's flags becomes that flag (`--max_step 5` -> `--max_steps 5`,
// `--lr-m=1e-6` -> `--lr-min=1e-6`); an ambiguous one is an error naming the candidates; anything else is kept.
std::vector<std::string> expand_flag_prefixes(CLI::App& app, const std::vector<std::string>& args);

// This process's communicator: one rank, or NCCL on cuda:LOCAL_RANK when launched as several (--device auto -> cuda).
std::unique_ptr<Communicator> communicator_for(const LaunchEnv& env, std::string& device);

void add_parity(CLI::App& app, int& exit_code);
void add_bench(CLI::App& app, int& exit_code);
void add_data(CLI::App& app, int& exit_code);
void add_train(CLI::App& app, int& exit_code);
void add_train_causal(CLI::App& train, int& exit_code);   // under `vdt train`
void add_train_distill(CLI::App& train, int& exit_code);  // under `vdt train`
void add_sample(CLI::App& app, int& exit_code);
void add_eval(CLI::App& app, int& exit_code);  // cli/eval.cpp
void add_demo(CLI::App& app, int& exit_code);
void add_ckpt(CLI::App& app, int& exit_code);
void add_data_synth(CLI::App& data_cmd, int& exit_code);    // cli/data_synth.cpp, called by add_data
void add_data_prepare(CLI::App& data_cmd, int& exit_code);  // cli/python_tool.cpp, called by add_data
void add_decode(CLI::App& app, int& exit_code);             // cli/python_tool.cpp
// Runs `python -m vdt_py <command> <args...>` (vdt's Python package, docs/python.md) as a child; its exit code.
int run_python_tool(const std::string& command, const std::vector<std::string>& args);
void add_ckpt_export(CLI::App& ckpt, int& exit_code);  // cli/ckpt_export.cpp, called by add_ckpt
void add_env(CLI::App& app, int& exit_code);           // cli/env.cpp
void add_flag_tables(CLI::App& app, int& exit_code);   // cli/flag_tables.cpp (hidden)
// The directory holding python/src and scripts/py_env.sh (<prefix>/share/vdt installed, else the checkout this binary
// was built from); "" when neither has them.
std::string python_tool_root();

}  // namespace vdt::cli
