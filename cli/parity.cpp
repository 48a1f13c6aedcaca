// `vdt parity FIXTURE`: prove the model is the reference Wan DiT (out, loss and gradients within tolerance).
#include <cstdio>

#include "cli/commands.h"
#include "train/parity.h"

namespace vdt::cli {

void add_parity(CLI::App& app, int& exit_code) {
  auto cfg = std::make_shared<ParityConfig>();
  auto* sub = app.add_subcommand("parity", "Compare the model against a reference fixture (FIXTURES.md format)");
  sub->add_option("fixture", cfg->fixture, "fixture .safetensors (weights, fixture.* tensors, metadata config)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--device", cfg->device, "cpu or cuda")->capture_default_str();
  sub->add_option("--dtype", cfg->dtype, "float32 or bfloat16")->capture_default_str();
  sub->add_option("--tol", cfg->tol, "relative L2 tolerance (default 1e-4 float32, 3e-2 bfloat16)");
  sub->callback([cfg, &exit_code] {
    const auto result = run_parity(*cfg);
    std::printf("parity %s  device %s  dtype %s  timestep_mode %s  tol %.1e\n", cfg->fixture.c_str(), cfg->device.c_str(),
                cfg->dtype.c_str(), result.timestep_mode.c_str(), cfg->tolerance());
    for (const auto& r : result.rows)
      std::printf("  %-48s rel_l2 %.3e  %s\n", r.name.c_str(), r.rel_l2, r.pass ? "ok" : "FAIL");
    std::printf("%s\n", result.pass() ? "PASS" : "FAIL");
    exit_code = result.pass() ? 0 : 1;
  });
}

}  // namespace vdt::cli
