// Per-clip features of latent video for a distribution distance (`vdt eval`, train/eval/frechet.h): a few statistics
// that a generator must get right for its clips to look like the data's, in two groups.
//   appearance: per channel, the clip's mean and its spatial standard deviation (mean over frames): colour and the
//               contrast between the parts and the floor, i.e. what one frame shows;
//   motion:     per channel, the RMS of the difference between consecutive frames (how much moves), and for each lag
//               k = 1 … F−1 the correlation between frames f and f + k, spatial means removed, averaged over f (how
//               long a pattern persists as it moves: parts that keep their shape and speed decay slowly, a stream
//               that loses them at a chunk boundary fast, a frozen one not at all).
// Features of a clip of C channels and F frames: 3C + F − 1. Not here: the distance, reading files.
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

namespace vdt {

struct FeatureGroup {
  std::string name;  // "appearance" | "motion"
  std::vector<int64_t> columns;
};

// The groups' columns in clip_features' output for C channels and F frames.
std::vector<FeatureGroup> clip_feature_groups(int64_t channels, int64_t frames);

// clips [N, C, F, H, W] (any float dtype, F >= 2) -> [N, 3C + F − 1] float64: columns mean (C), spatial std (C),
// frame-difference RMS (C), lag correlations (F − 1).
torch::Tensor clip_features(const torch::Tensor& clips);

}  // namespace vdt
