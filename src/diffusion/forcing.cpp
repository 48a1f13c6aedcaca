#include "diffusion/forcing.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

void ForcingConfig::validate() const {
  VDT_CHECK(chunks >= 1, "span of ", chunks, " chunks: expected >= 1");
  VDT_CHECK(chunk_frames >= 1, "--chunk-frames ", chunk_frames, ": expected >= 1");
  VDT_CHECK(level_shift > 0, "--level-shift ", level_shift, ": expected > 0");
}

namespace {
// Timesteps [n] float32 as the model receives them: rounded to `dtype` first when `round`, else as they are.
torch::Tensor model_timesteps(const torch::Tensor& t, torch::ScalarType dtype, bool round) {
  return round ? t.to(dtype).to(torch::kFloat32) : t.to(torch::kFloat32);
}
}  // namespace

double df_sigma(double u, double shift) { return shift * u / (1.0 + (shift - 1.0) * u); }

DfExample make_df_example(const torch::Tensor& x0, const torch::Tensor& noise, const std::vector<double>& u,
                          const ForcingConfig& cfg, const FlowGrid& grid, const torch::Tensor& grid_weights) {
  cfg.validate();
  const int64_t B = x0.size(0), F = x0.size(2);
  VDT_CHECK(x0.dim() == 5 && F == cfg.chunks * cfg.chunk_frames, "diffusion forcing: latents ", x0.sizes(),
            " do not hold ", cfg.chunks, " chunks of ", cfg.chunk_frames, " frames");
  VDT_CHECK(static_cast<int64_t>(u.size()) == cfg.chunks, "diffusion forcing: ", u.size(), " noise levels for ",
            cfg.chunks, " chunks");
  DfExample ex;
  std::vector<float> sigma_f(static_cast<size_t>(F));
  for (int64_t c = 0; c < cfg.chunks; ++c) {
    const double s = df_sigma(u[c], cfg.level_shift);
    ex.sigmas.push_back(s);
    ex.weights.push_back(grid_weights[nearest_index(grid, 1000.0 * s)].item<double>());
    for (int64_t f = 0; f < cfg.chunk_frames; ++f) sigma_f[c * cfg.chunk_frames + f] = static_cast<float>(s);
  }
  if (cfg.clean_first_frame) sigma_f[0] = 0;
  auto sig = torch::tensor(sigma_f).to(x0.device());  // [F]
  auto sig5 = sig.view({1, 1, F, 1, 1});              // broadcast over [B, C, F, H, W]
  ex.x_t = add_noise(x0.to(torch::kFloat32), noise.to(torch::kFloat32), sig5).to(x0.scalar_type());
  ex.target = velocity_target(x0.to(torch::kFloat32), noise.to(torch::kFloat32)).to(x0.scalar_type());
  // A Wan base sees each timestep rounded to the compute dtype (x0's), as the SFT objective; an H3 base sees it in
  // float32, as DiffSynth's H3 loss (flow_schedule). Sigma, the mixing and the weights above come from the exact level.
  // (on the host, as the SFT example's: model_inputs finds the distinct rows there without a device sync)
  ex.round_timestep = cfg.round_timestep;
  ex.t = model_timesteps(torch::tensor(sigma_f) * 1000.0, x0.scalar_type(), cfg.round_timestep)
             .unsqueeze(0)
             .expand({B, F})
             .contiguous();  // [B, F]
  return ex;
}

DfExample make_tf_example(const torch::Tensor& x0, const torch::Tensor& noise, const std::vector<double>& u,
                          const ForcingConfig& cfg, const FlowGrid& grid, const torch::Tensor& grid_weights) {
  auto ex = make_df_example(x0, noise, u, cfg, grid, grid_weights);
  ex.x_t = torch::cat({x0.to(ex.x_t.scalar_type()), ex.x_t}, 2);  // [B, C, 2F, H, W]
  ex.t = torch::cat({torch::zeros_like(ex.t), ex.t}, 1);          // [B, 2F]: clean half at timestep 0
  ex.teacher_forcing = true;
  return ex;
}

torch::Tensor df_loss(const torch::Tensor& pred_all, const DfExample& ex, const ForcingConfig& cfg) {
  const int64_t F = ex.target.size(2);
  VDT_CHECK(pred_all.size(2) == (ex.teacher_forcing ? 2 * F : F), "df_loss: prediction of ", pred_all.size(2),
            " frames for a span of ", F, ex.teacher_forcing ? " (teacher forcing: expected 2F)" : "");
  const auto pred = ex.teacher_forcing ? pred_all.narrow(2, F, F) : pred_all;
  auto total = torch::zeros({}, pred.options().dtype(torch::kFloat32));
  for (int64_t c = 0; c < cfg.chunks; ++c) {
    int64_t begin = c * cfg.chunk_frames, n = cfg.chunk_frames;
    if (c == 0 && cfg.clean_first_frame) ++begin, --n;
    if (n == 0) continue;
    auto d = pred.narrow(2, begin, n).to(torch::kFloat32) - ex.target.narrow(2, begin, n).to(torch::kFloat32);
    total = total + d.pow(2).mean() * ex.weights[c];
  }
  return total / static_cast<double>(cfg.chunks);
}

DfStream make_df_stream(const torch::Tensor& x0, const torch::Tensor& noise, const DfExample& ex,
                        const std::vector<int64_t>& bounds) {
  const int64_t A = x0.size(-1), B = x0.size(0);
  VDT_CHECK(bounds.size() == ex.sigmas.size() + 1 && bounds.front() == 0 && bounds.back() == A, "diffusion forcing: a ",
            "side stream of ", A, " steps does not split into the span's ", ex.sigmas.size(), " chunks");
  std::vector<float> sigma(static_cast<size_t>(A));
  for (size_t c = 0; c + 1 < bounds.size(); ++c)
    for (int64_t j = bounds[c]; j < bounds[c + 1]; ++j)
      sigma[static_cast<size_t>(j)] = static_cast<float>(ex.sigmas[c]);
  auto sig = torch::tensor(sigma).to(x0.device());  // [A], broadcast over [B, ..., A]
  DfStream s;
  s.bounds = bounds;
  const auto x0f = x0.to(torch::kFloat32), nf = noise.to(torch::kFloat32);
  s.x_t = add_noise(x0f, nf, sig).to(x0.scalar_type());
  s.target = velocity_target(x0f, nf).to(x0.scalar_type());
  s.t = model_timesteps(sig * 1000.0, x0.scalar_type(), ex.round_timestep)
            .unsqueeze(0)
            .expand({B, A})
            .contiguous();  // [B, A]
  if (ex.teacher_forcing) {
    s.x_t = torch::cat({x0.to(s.x_t.scalar_type()), s.x_t}, -1);  // [B, ..., 2A]
    s.t = torch::cat({torch::zeros_like(s.t), s.t}, 1);           // [B, 2A]
  }
  return s;
}

torch::Tensor stream_timesteps(const torch::Tensor& t, const std::vector<int64_t>& bounds, int64_t chunk_frames) {
  const int64_t chunks = static_cast<int64_t>(bounds.size()) - 1;
  VDT_CHECK(chunks >= 1 && t.dim() == 2 && t.size(1) == chunks * chunk_frames, "stream_timesteps: t ", t.sizes(),
            " is not ", chunks, " chunks of ", chunk_frames, " frames");
  std::vector<torch::Tensor> parts;
  for (int64_t c = 0; c < chunks; ++c)  // [B, 1] -> [B, steps of chunk c]
    parts.push_back(t.narrow(1, c * chunk_frames, 1).expand({t.size(0), bounds[c + 1] - bounds[c]}));
  return torch::cat(parts, 1).contiguous();  // [B, A]
}

torch::Tensor df_stream_loss(const torch::Tensor& pred_all, const DfStream& s, const DfExample& ex) {
  const int64_t A = s.target.size(-1);
  VDT_CHECK(pred_all.size(-1) == (ex.teacher_forcing ? 2 * A : A), "df_stream_loss: prediction of ", pred_all.size(-1),
            " steps for a stream of ", A);
  const auto pred = ex.teacher_forcing ? pred_all.narrow(-1, A, A) : pred_all;
  auto total = torch::zeros({}, pred.options().dtype(torch::kFloat32));
  for (size_t c = 0; c + 1 < s.bounds.size(); ++c) {
    const int64_t begin = s.bounds[c], n = s.bounds[c + 1] - begin;
    if (n == 0) continue;
    auto d = pred.narrow(-1, begin, n).to(torch::kFloat32) - s.target.narrow(-1, begin, n).to(torch::kFloat32);
    total = total + d.pow(2).mean() * ex.weights[c];
  }
  return total / static_cast<double>(s.bounds.size() - 1);
}

}  // namespace vdt
