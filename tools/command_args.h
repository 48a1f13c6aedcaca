// The command lines of the commands without a tool of their own, declared as every command's are
// (train/loop/config_fields.h): `vdt data check|inspect` (src/data's check_root and DataRoot), `vdt demo`, `vdt env`
// and the hidden `vdt flag-tables`. Their docs/cli.md tables come from here (tools/flag_tables.h).
// Not here: what the commands do (cli/data.cpp, cli/demo.cpp, cli/env.cpp, cli/flag_tables.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/loop/config_sections.h"

namespace vdt {

struct DataCheckArgs {
  std::string root, text_table, res;  // text_table empty: <root>/text_table.safetensors; res empty: not checked
  static const std::vector<ConfigField<DataCheckArgs>>& fields();
};

struct DataInspectArgs {
  std::string root;
  static const std::vector<ConfigField<DataInspectArgs>>& fields();
};

struct DemoArgs {
  std::string out = "vdt-demo";
  int64_t steps = 400;
  uint64_t seed = 0;
  int workers = 2;
  std::string resume;  // auto: continue the demo's training from its last saved state
  static const std::vector<ConfigField<DemoArgs>>& fields();
};

struct EnvArgs {
  bool json = false;
  static const std::vector<ConfigField<EnvArgs>>& fields();
};

struct FlagTablesArgs {
  std::vector<std::string> pages;
  bool check = false;
  static const std::vector<ConfigField<FlagTablesArgs>>& fields();
};

}  // namespace vdt
