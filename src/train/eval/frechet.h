// The Fréchet distance between two Gaussians fitted to two sets of feature vectors (FID's distance, Heusel et al.
// 2017): d² = |μa − μb|² + tr(Σa + Σb − 2 (Σa Σb)^½), in float64. What `vdt eval` reports on the clip features of
// train/eval/clip_features.h. Not here: which features, or reading files (tools/latent_eval.h).
#pragma once
#include <torch/types.h>

namespace vdt {

struct GaussianFit {
  torch::Tensor mean;  // [K] float64
  torch::Tensor cov;   // [K, K] float64, the unbiased sample covariance (N − 1)
  int64_t n = 0;       // vectors fitted
};

// Mean and covariance of `features` [N, K] (N >= 2); throws naming `what` when N < 2 or a value is not finite.
GaussianFit fit_gaussian(const torch::Tensor& features, const std::string& what);

// d² between N(μa, Σa) and N(μb, Σb). tr (Σa Σb)^½ = tr (Σa^½ Σb Σa^½)^½, the square roots of symmetric PSD matrices
// taken through their eigendecompositions (eigenvalues below zero, from rounding, count as zero), so the result is
// real and >= 0 up to rounding. Shapes must match.
double frechet_distance(const GaussianFit& a, const GaussianFit& b);

// The same d² from the two sets of vectors [Na, K], [Nb, K].
double frechet_distance(const torch::Tensor& features_a, const torch::Tensor& features_b);

}  // namespace vdt
