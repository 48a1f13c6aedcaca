// `vdt sample` of an SFT export (docs/design.md §2 sampling, beyond the Python trainers): Euler over the Wan inference
// grid with two-branch CFG — the negative branch has ids all UNKNOWN and the null prompt in every cell — and frame 0
// taken from the clip's ground truth. Also samples "without conditions" (the negative branch alone) for previews (the
// SFT trainer's). Not here: causal models (generate/request.h, generate/window.h).
#pragma once
#include <string>

#include "data/sft_dataset.h"
#include "diffusion/euler.h"
#include "model/denoiser.h"

namespace vdt {

struct SampleResult {
  std::string clip_id;
  torch::Tensor ground_truth;   // [C, F, H, W] float32
  torch::Tensor conditioned;    // [C, F, H, W] float32, CFG with ids and text
  torch::Tensor unconditioned;  // [C, F, H, W] float32, UNKNOWN ids and null text only
};

// Samples clip `index` of `ds` (validation split: no dropout). Noise from (seed, clip id). `prompt`: when given, the
// conditioned branch has this prompt (a row of ds's text table) in every cell instead of the clip's own text; ids and
// frame 0 still come from the clip.
SampleResult sample_clip(Denoiser& model, const SftDataset& ds, size_t index, const EulerConfig& cfg, uint64_t seed,
                         const std::string* prompt = nullptr);

}  // namespace vdt
