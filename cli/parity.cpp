// `vdt parity FIXTURE`: prove a model is the reference (out / logits, loss and gradients within tolerance). The model
// family comes from the fixture's metadata: a Wan DiT config (tools/parity.h) or MiniMax-H3 constructor arguments
// (tools/h3_parity.h, which also rebuilds the packed sequence through vdt's packer).
#include <cstdio>

#include "cli/commands.h"
#include "core/safetensors.h"
#include "tools/h3_parity.h"
#include "tools/parity.h"

namespace vdt::cli {

void add_parity(CLI::App& app, int& exit_code) {
  auto cfg = std::make_shared<ParityConfig>();
  auto* sub = app.add_subcommand("parity",
                                 "Compare a model against a reference fixture (FIXTURES.md format: Wan or "
                                 "MiniMax-H3, read from its metadata)");
  bind_fields(sub, cfg, ParityConfig::fields());
  sub->callback([cfg, &exit_code] {
    const bool h3 = is_h3_fixture(SafetensorsFile::open(cfg->fixture)->metadata());
    ParityResult result;
    std::vector<std::string> notes;
    if (h3) {
      auto r = run_h3_parity(*cfg);
      notes = r.notes;
      result = r;
    } else {
      result = run_parity(*cfg);
    }
    std::printf("parity %s  model %s  device %s  dtype %s  timestep_mode %s%s%s  tol %.1e\n", cfg->fixture.c_str(),
                h3 ? "minimax-h3" : "wan", cfg->device.c_str(), cfg->dtype.c_str(), result.timestep_mode.c_str(),
                result.loss.empty() ? "" : "  loss over ", result.loss.c_str(),
                h3 ? h3_parity_tolerance(*cfg) : cfg->tolerance());
    for (const auto& r : result.rows)
      std::printf("  %-48s rel_l2 %.3e  %s\n", r.name.c_str(), r.rel_l2, r.pass ? "ok" : "FAIL");
    for (const auto& n : notes) std::printf("  note: %s\n", n.c_str());
    std::printf("%s\n", result.pass() ? "PASS" : "FAIL");
    exit_code = result.pass() ? 0 : 1;
  });
}

}  // namespace vdt::cli
