// The small commands' flags (command_args.h).
#include "tools/command_args.h"

namespace vdt {

const std::vector<ConfigField<DataCheckArgs>>& DataCheckArgs::fields() {
  using C = DataCheckArgs;
  static const std::vector<ConfigField<C>> f = {
      {"root", "data root (dataset.json, index/, latents/, cond/, meta/)", &C::root, true},
      {"--text_table", "text table (empty: <root>/text_table.safetensors)", &C::text_table},
      {"--res", "expected resolution WxH (e.g. 832x480); empty: not checked", &C::res},
  };
  return f;
}

const std::vector<ConfigField<DataInspectArgs>>& DataInspectArgs::fields() {
  static const std::vector<ConfigField<DataInspectArgs>> f = {{"root", "data root", &DataInspectArgs::root, true}};
  return f;
}

const std::vector<ConfigField<DemoArgs>>& DemoArgs::fields() {
  using C = DemoArgs;
  static const std::vector<ConfigField<C>> f = {
      {"--out", "demo directory (data/, run/, samples/, plot.png)", &C::out},
      {"--steps", "training steps", &C::steps},
      seed_field(&C::seed),
      {"--num_workers", "loader threads", &C::workers},
      {"--resume",
       "auto: continue the demo's training from its last saved state (after Ctrl-C) instead of starting over",
       &C::resume},
  };
  return f;
}

const std::vector<ConfigField<EnvArgs>>& EnvArgs::fields() {
  static const std::vector<ConfigField<EnvArgs>> f = {
      {"--json", "one JSON object instead of the text (for tools)", &EnvArgs::json}};
  return f;
}

const std::vector<ConfigField<FlagTablesArgs>>& FlagTablesArgs::fields() {
  using C = FlagTablesArgs;
  static const std::vector<ConfigField<C>> f = {
      {"pages", "markdown pages holding flag tables or stated defaults", &C::pages, true},
      {"--check", "write nothing; print the differences and exit 1 when a page is out of date", &C::check},
  };
  return f;
}

}  // namespace vdt
