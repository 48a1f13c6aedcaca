// Parity against an H3 reference fixture (fixtures/FIXTURES.md "MiniMax-H3 fixtures"): build H3DiT from the
// fixture's `config` metadata, load its weights strictly, run the stored packed inputs (the reference's exact
// MiniMaxH3DiT.forward arguments), the loss of model_fn_minimax_h3's prediction and its backward, and compare
// video/audio logits, predictions, loss terms and every fixture.grad.* by relative L2. Then, when the fixture's
// `packing` metadata names a layout h3_packer builds, the same through the packer from the unpacked inputs.
// For `vdt parity` to dispatch on (is_h3_fixture). Not here: printing (the CLI), producing fixtures.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/attention.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_packer.h"
#include "tools/parity.h"

namespace vdt {

struct H3ParityOptions {
  bool packer = true;  // also rebuild the packed sequence from the unpacked inputs (packer.* rows)
  AttentionKernel kernel = AttentionKernel::sdpa;
};

struct H3ParityResult : ParityResult {
  std::vector<std::string> notes;  // what was not compared, and why
};

// True when the fixture's `config` metadata is H3 constructor arguments (not a Wan config).
bool is_h3_fixture(const Metadata& metadata);
// The stored packed call of a fixture (fixture.x, ..., the *_pos_info and *packed_seq_params tensors) on `device`.
H3Inputs h3_fixture_inputs(const SafetensorsSet& files, const torch::Device& device);
// The layout spec of the builder arguments in a fixture's `packing` metadata (T2VA/FL2VA arguments, Ref2VA
// `ref_blocks` geometry); nullopt with a line in `notes` when there is none or it is not understood.
std::optional<H3LayoutSpec> h3_fixture_layout(const Metadata& metadata, std::vector<std::string>& notes);
// Default tolerance: 1e-5 for float32 (a faithful port lands near 1e-6), 5e-2 for bfloat16; cfg.tol >= 0 wins.
double h3_parity_tolerance(const ParityConfig& cfg);

// cfg: fixture, device (cpu | cuda), dtype (float32 | bfloat16: bf16 blocks with the release's fp32 islands;
// positions stay float64 -> float32), tol. Row names: fixture.* tensor names, and packer.* for the packer checks.
H3ParityResult run_h3_parity(const ParityConfig& cfg, const H3ParityOptions& opts = {});

}  // namespace vdt
