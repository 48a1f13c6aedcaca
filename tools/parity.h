// Parity against a reference fixture (fixtures/FIXTURES.md format): build the model from the fixture's `config`
// metadata, load its weights, run forward and the fixture's loss backward, and compare out, loss and every
// fixture.grad.* by relative L2 error. Used by `vdt parity` and the parity tests.
// Not here: producing fixtures (that is the reference implementation's job).
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include "core/safetensors.h"
#include "train/loop/config_sections.h"

#include <string>
#include <vector>

namespace vdt {

struct ParityConfig {
  std::string fixture;
  std::string device = "cpu";     // cpu | cuda | cuda:N
  std::string dtype = "float32";  // float32 | bfloat16
  double tol = -1;                // < 0: 1e-4 for float32, 3e-2 for bfloat16
  void validate() const;
  static const std::vector<ConfigField<ParityConfig>>& fields();
  double tolerance() const;
};

struct ParityRow {
  std::string name;
  double rel_l2 = 0;
  bool pass = false;
};

struct ParityResult {
  std::vector<ParityRow> rows;
  std::string timestep_mode;
  std::string loss;  // the loss the fixture states (metadata `loss`): "frames 1.." or "all frames"
  bool pass() const;
};

// After the fixture's loss backward: (fixture.grad.<param>, that parameter's gradient) for every stored gradient of
// `fixture` (an open SafetensorsSet); an error names a stored gradient whose parameter is missing or got none.
std::vector<std::pair<std::string, torch::Tensor>> fixture_gradients(const SafetensorsSet& files,
                                                                     const torch::nn::Module& model,
                                                                     const std::string& fixture);

// Whether a Wan fixture's stated loss (metadata `loss`) leaves latent frame 0 out: "... frames 1.. ..." yes, "... all
// frames ..." no; absent: yes (FIXTURES.md: every Wan fixture's loss is over frames 1..). Anything else is an error
// naming the fixture and the value.
bool loss_skips_first_frame(const Metadata& meta, const std::string& fixture);

// Relative L2 error |a - b| / |b| in float64.
double rel_l2(const torch::Tensor& a, const torch::Tensor& ref);
ParityResult run_parity(const ParityConfig& cfg);

}  // namespace vdt
