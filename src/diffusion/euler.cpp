// Euler + CFG as DiffSynth's Wan pipeline: the model sees t_k (frame 0 at 0 under first-frame conditioning).
#include "diffusion/euler.h"

#include <torch/torch.h>

#include "core/error.h"
#include "diffusion/flow_match.h"

namespace vdt {

torch::Tensor euler_sample(const VelocityFn& positive, const VelocityFn& negative, const torch::Tensor& noise,
                           const torch::Tensor& first_frame, const EulerConfig& cfg) {
  VDT_CHECK(noise.dim() == 5, "euler_sample: noise must be [B, C, F, H, W], got ", noise.sizes());
  VDT_CHECK(!cfg.first_frame_cond || (first_frame.defined() && first_frame.size(2) == 1),
            "euler_sample: first-frame conditioning needs first_frame [B, C, 1, H, W]");
  torch::NoGradGuard ng;
  const auto grid = inference_grid(cfg.steps, cfg.shift, cfg.denoising_strength);
  const int64_t B = noise.size(0), F = noise.size(2);
  auto x = noise.clone();
  if (cfg.first_frame_cond) x.slice(2, 0, 1).copy_(first_frame);
  for (int64_t k = 0; k < cfg.steps; ++k) {
    const double sigma = grid.sigmas[k].item<double>();
    const double sigma_next = k + 1 < cfg.steps ? grid.sigmas[k + 1].item<double>() : 0.0;
    auto t = torch::full({B, F}, grid.timesteps[k].item<double>(), noise.options().dtype(torch::kFloat32));
    if (cfg.first_frame_cond) t.select(1, 0).zero_();
    auto v = positive(x, t);
    if (negative) {
      auto vn = negative(x, t);
      v = vn + cfg.cfg_scale * (v - vn);
    }
    x = x + v.to(x.scalar_type()) * (sigma_next - sigma);
    if (cfg.first_frame_cond) x.slice(2, 0, 1).copy_(first_frame);
  }
  return x;
}

torch::Tensor causal_euler_sample(const VelocityFn& positive, const VelocityFn& negative, const torch::Tensor& noise,
                                  const torch::Tensor& first_frame, int64_t chunk_frames, const EulerConfig& cfg) {
  const int64_t F = noise.size(2);
  TORCH_CHECK(chunk_frames >= 1 && F % chunk_frames == 0, "causal_euler_sample: ", F, " frames do not split into chunks "
              "of ", chunk_frames);
  torch::Tensor prefix;  // [B, C, k cf, H, W] the chunks sampled so far
  for (int64_t k = 0; k < F / chunk_frames; ++k) {
    auto with_prefix = [&](const VelocityFn& fn) -> VelocityFn {
      if (!fn) return {};
      return [&, fn](const torch::Tensor& x, const torch::Tensor& t) {
        if (!prefix.defined()) return fn(x, t);
        auto full = torch::cat({prefix.to(x.scalar_type()), x}, 2);  // [B, C, (k+1) cf, H, W]
        auto tf = torch::cat({torch::zeros({t.size(0), prefix.size(2)}, t.options()), t}, 1);  // [B, (k+1) cf]
        return fn(full, tf).narrow(2, prefix.size(2), x.size(2));
      };
    };
    EulerConfig c = cfg;
    c.first_frame_cond = k == 0 && first_frame.defined();
    auto chunk = euler_sample(with_prefix(positive), with_prefix(negative),
                              noise.narrow(2, k * chunk_frames, chunk_frames), c.first_frame_cond ? first_frame
                                                                                                  : torch::Tensor(), c);
    prefix = prefix.defined() ? torch::cat({prefix, chunk}, 2) : chunk;
  }
  return prefix;
}

}  // namespace vdt
