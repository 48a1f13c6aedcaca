// `vdt sample` for the SFT model (docs/design.md §2 sampling, beyond the Python trainers): Euler over the Wan inference
// grid with two-branch CFG — the negative branch has ids all UNKNOWN and the null prompt in every cell — and frame 0
// taken from the clip's ground truth. Also samples "without conditions" (the negative branch alone) for previews. `vdt
// sample --causal`: a causal model's validation windows chunk by chunk (diffusion/euler.h causal_euler_sample),
// guidance against the null prompt.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "data/causal_dataset.h"
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

struct CausalSampleResult {
  std::string clip_id;
  int64_t start = 0;           // first latent frame of the window in the clip's stream
  torch::Tensor ground_truth;  // [C, span, H, W] float32
  torch::Tensor sample;        // [C, span, H, W] float32
  std::map<std::string, torch::Tensor> side_ground_truth, side_sample;  // H3: "audio" [2, Da, A] float32
};

// Samples val window `index` of `ds` chunk by chunk (block-causal with `chunk_frames` per chunk), CFG against the
// null prompt in every frame, frame 0 from the ground truth when `clean_first_frame`. The family's conditioning (H3:
// Picture 1, token tags) is fixed and each side stream the base denoises (H3's audio) is sampled with its chunk.
// Noise from (seed, clip, start). `prompt`: when given, this prompt (a row of ds's text table) in every frame of the
// conditioned branch instead of the window's own text (the noise, frame 0 and the conditioning stay the window's).
CausalSampleResult sample_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                        const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                        const std::string* prompt = nullptr);

}  // namespace vdt
