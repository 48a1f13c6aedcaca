// Fréchet distance of two fitted Gaussians (frechet.h), float64 throughout.
#include "train/eval/frechet.h"

#include <torch/torch.h>

#include <string>

#include "core/error.h"

namespace vdt {
namespace {

// Σ^½ of a symmetric PSD matrix: V diag(√max(λ, 0)) Vᵀ.
torch::Tensor psd_sqrt(const torch::Tensor& m) {
  const auto [evals, evecs] = torch::linalg_eigh(0.5 * (m + m.t()));
  return evecs.matmul(torch::diag(evals.clamp_min(0).sqrt())).matmul(evecs.t());
}

}  // namespace

GaussianFit fit_gaussian(const torch::Tensor& features, const std::string& what) {
  VDT_CHECK(features.dim() == 2, what, ": features must be [N, K], got ", features.sizes());
  VDT_CHECK(features.size(0) >= 2, what, ": ", features.size(0),
            " clip(s); a covariance needs at least 2 (the more, the closer the fit: give more clips)");
  const auto x = features.to(torch::kFloat64);
  VDT_CHECK(torch::isfinite(x).all().item<bool>(), what, ": a feature is NaN or Inf (a latent holds one?)");
  GaussianFit g;
  g.n = x.size(0);
  g.mean = x.mean(0);
  const auto centred = x - g.mean;                                     // [N, K]
  g.cov = centred.t().matmul(centred) / static_cast<double>(g.n - 1);  // [K, K]
  return g;
}

double frechet_distance(const GaussianFit& a, const GaussianFit& b) {
  VDT_CHECK(a.mean.sizes() == b.mean.sizes() && a.cov.sizes() == b.cov.sizes(),
            "frechet_distance: the two fits have different feature sizes (", a.mean.sizes(), " and ", b.mean.sizes(),
            ")");
  const auto sa = psd_sqrt(a.cov);
  const auto inner = sa.matmul(b.cov).matmul(sa);  // symmetric PSD: Σa^½ Σb Σa^½
  const double tr_sqrt = torch::linalg_eigvalsh(0.5 * (inner + inner.t())).clamp_min(0).sqrt().sum().item<double>();
  const double mean_term = (a.mean - b.mean).square().sum().item<double>();
  const double d = mean_term + a.cov.trace().item<double>() + b.cov.trace().item<double>() - 2.0 * tr_sqrt;
  return d < 0 ? 0.0 : d;  // rounding below zero for (near) equal fits
}

double frechet_distance(const torch::Tensor& features_a, const torch::Tensor& features_b) {
  return frechet_distance(fit_gaussian(features_a, "the first set"), fit_gaussian(features_b, "the second set"));
}

}  // namespace vdt
