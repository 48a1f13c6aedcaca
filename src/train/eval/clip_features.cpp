// Per-clip appearance and motion statistics (clip_features.h), float64.
#include "train/eval/clip_features.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

std::vector<FeatureGroup> clip_feature_groups(int64_t channels, int64_t frames) {
  FeatureGroup appearance{"appearance", {}}, motion{"motion", {}};
  for (int64_t i = 0; i < 2 * channels; ++i) appearance.columns.push_back(i);
  for (int64_t i = 2 * channels; i < 3 * channels + frames - 1; ++i) motion.columns.push_back(i);
  return {appearance, motion};
}

torch::Tensor clip_features(const torch::Tensor& clips) {
  VDT_CHECK(clips.dim() == 5, "clip_features: expected clips [N, C, F, H, W], got ", clips.sizes());
  const int64_t F = clips.size(2);
  VDT_CHECK(F >= 2, "clip_features: a clip needs at least 2 frames for its motion features, got ", F);
  const auto x = clips.to(torch::kFloat64);
  const auto mean = x.mean({2, 3, 4});                                 // [N, C]
  const auto spatial_std = x.std({3, 4}, /*unbiased=*/false).mean(2);  // [N, C, F] -> [N, C]
  const auto diff = x.slice(2, 1) - x.slice(2, 0, F - 1);              // [N, C, F-1, H, W]
  const auto diff_rms = diff.square().mean({2, 3, 4}).sqrt();          // [N, C]
  const auto centred = x - x.mean({3, 4}, /*keepdim=*/true);           // per frame and channel
  const auto frames = centred.transpose(1, 2).flatten(2);              // [N, C, F, H, W] -> [N, F, C*H*W]
  const auto norms = frames.norm(2, /*dim=*/2).clamp_min(1e-12);       // [N, F]
  std::vector<torch::Tensor> lags;
  for (int64_t k = 1; k < F; ++k) {
    const auto dot = (frames.slice(1, 0, F - k) * frames.slice(1, k)).sum(2);        // [N, F-k]
    lags.push_back((dot / (norms.slice(1, 0, F - k) * norms.slice(1, k))).mean(1));  // [N]
  }
  return torch::cat({mean, spatial_std, diff_rms, torch::stack(lags, 1)}, 1);  // [N, 3C + F - 1]
}

}  // namespace vdt
