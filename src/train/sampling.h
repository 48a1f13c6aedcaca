// `vdt sample` for the SFT model (SPEC §2 sampling, beyond the seeds): Euler over the Wan inference grid with
// two-branch CFG — the negative branch has ids all UNKNOWN and the null prompt in every cell — and frame 0 taken
// from the clip's ground truth. Also samples "without conditions" (the negative branch alone) for previews.
#pragma once
#include <string>
#include <vector>

#include "data/sft_dataset.h"
#include "diffusion/euler.h"
#include "model/wan_dit.h"

namespace vdt {

struct SampleResult {
  std::string clip_id;
  torch::Tensor ground_truth;   // [C, F, H, W] float32
  torch::Tensor conditioned;    // [C, F, H, W] float32, CFG with ids and text
  torch::Tensor unconditioned;  // [C, F, H, W] float32, UNKNOWN ids and null text only
};

// Samples clip `index` of `ds` (validation split: no dropout). Noise from (seed, clip id).
SampleResult sample_clip(WanDiTImpl& model, const SftDataset& ds, size_t index, const EulerConfig& cfg, uint64_t seed);

}  // namespace vdt
