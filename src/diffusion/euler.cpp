// Euler + CFG as DiffSynth's Wan pipeline: the model sees t_k (frame 0 at 0 under first-frame conditioning).
#include "diffusion/euler.h"

#include <torch/torch.h>

#include "core/error.h"
#include "diffusion/flow_match.h"

namespace vdt {

namespace {

// A video-only callback as a state callback.
StateVelocityFn of_video(const VelocityFn& fn) {
  if (!fn) return {};
  return [fn](const SampleState& x, const torch::Tensor& t) { return SampleState{fn(x.video, t), {}}; };
}

torch::Tensor side_velocity(const SampleState& v, const std::string& name) {
  auto it = v.side.find(name);
  VDT_CHECK(it != v.side.end(), "euler_sample: the velocity callback returned no '", name, "' stream");
  return it->second;
}

}  // namespace

torch::Tensor euler_sample(const VelocityFn& positive, const VelocityFn& negative, const torch::Tensor& noise,
                           const torch::Tensor& first_frame, const EulerConfig& cfg) {
  return euler_sample(of_video(positive), of_video(negative), SampleState{noise, {}}, first_frame, cfg).video;
}

SampleState euler_sample(const StateVelocityFn& positive, const StateVelocityFn& negative, const SampleState& noise,
                         const torch::Tensor& first_frame, const EulerConfig& cfg) {
  VDT_CHECK(noise.video.dim() == 5, "euler_sample: noise must be [B, C, F, H, W], got ", noise.video.sizes());
  VDT_CHECK(!cfg.first_frame_cond || (first_frame.defined() && first_frame.size(2) == 1),
            "euler_sample: first-frame conditioning needs first_frame [B, C, 1, H, W]");
  torch::NoGradGuard ng;
  const auto grid = inference_grid(cfg.steps, cfg.shift, cfg.denoising_strength);
  const int64_t B = noise.video.size(0), F = noise.video.size(2);
  SampleState x{noise.video.clone(), {}};
  for (const auto& [name, s] : noise.side) x.side[name] = s.clone();
  if (cfg.first_frame_cond) x.video.slice(2, 0, 1).copy_(first_frame);
  for (int64_t k = 0; k < cfg.steps; ++k) {
    const double sigma = grid.sigmas[k].item<double>();
    const double sigma_next = k + 1 < cfg.steps ? grid.sigmas[k + 1].item<double>() : 0.0;
    auto t = torch::full({B, F}, grid.timesteps[k].item<double>(), noise.video.options().dtype(torch::kFloat32));
    if (cfg.first_frame_cond) t.select(1, 0).zero_();
    auto v = positive(x, t);
    if (negative) {
      const auto vn = negative(x, t);
      v.video = vn.video + cfg.cfg_scale * (v.video - vn.video);
      for (auto& [name, s] : v.side) s = side_velocity(vn, name) + cfg.cfg_scale * (s - side_velocity(vn, name));
    }
    x.video = x.video + v.video.to(x.video.scalar_type()) * (sigma_next - sigma);
    for (auto& [name, s] : x.side) s = s + side_velocity(v, name).to(s.scalar_type()) * (sigma_next - sigma);
    if (cfg.first_frame_cond) x.video.slice(2, 0, 1).copy_(first_frame);
  }
  return x;
}

torch::Tensor causal_euler_sample(const VelocityFn& positive, const VelocityFn& negative, const torch::Tensor& noise,
                                  const torch::Tensor& first_frame, int64_t chunk_frames, const EulerConfig& cfg) {
  return causal_euler_sample(of_video(positive), of_video(negative), SampleState{noise, {}}, {}, first_frame,
                             chunk_frames, cfg)
      .video;
}

SampleState causal_euler_sample(const StateVelocityFn& positive, const StateVelocityFn& negative,
                                const SampleState& noise, const SideBounds& bounds, const torch::Tensor& first_frame,
                                int64_t chunk_frames, const EulerConfig& cfg) {
  const int64_t F = noise.video.size(2);
  VDT_CHECK(chunk_frames >= 1 && F % chunk_frames == 0, "causal_euler_sample: ", F,
            " frames do not split into chunks "
            "of ",
            chunk_frames);
  const int64_t chunks = F / chunk_frames;
  for (const auto& [name, s] : noise.side) {
    auto it = bounds.find(name);
    VDT_CHECK(
        it != bounds.end() && static_cast<int64_t>(it->second.size()) == chunks + 1 && it->second.back() == s.size(-1),
        "causal_euler_sample: the side stream '", name, "' (", s.size(-1), " steps) needs bounds for ", chunks,
        " chunks ending at its length");
  }
  SampleState done;  // the chunks sampled so far: video [B, C, k cf, H, W], side streams up to bounds[k]
  for (int64_t k = 0; k < chunks; ++k) {
    auto with_prefix = [&](const StateVelocityFn& fn) -> StateVelocityFn {
      if (!fn) return {};
      return [&, fn](const SampleState& x, const torch::Tensor& t) {
        if (!done.video.defined()) return fn(x, t);
        SampleState full{torch::cat({done.video.to(x.video.scalar_type()), x.video}, 2), {}};  // [B, C, (k+1) cf, ..]
        for (const auto& [name, s] : x.side)
          full.side[name] = torch::cat({done.side.at(name).to(s.scalar_type()), s}, -1);
        const auto tf =
            torch::cat({torch::zeros({t.size(0), done.video.size(2)}, t.options()), t}, 1);  // [B, (k+1) cf]
        auto v = fn(full, tf);
        SampleState out{v.video.narrow(2, done.video.size(2), x.video.size(2)), {}};
        for (const auto& [name, s] : x.side)
          out.side[name] = side_velocity(v, name).narrow(-1, done.side.at(name).size(-1), s.size(-1));
        return out;
      };
    };
    SampleState chunk_noise{noise.video.narrow(2, k * chunk_frames, chunk_frames), {}};
    for (const auto& [name, s] : noise.side) {
      const auto& b = bounds.at(name);
      chunk_noise.side[name] = s.narrow(-1, b[k], b[k + 1] - b[k]);
    }
    EulerConfig c = cfg;
    c.first_frame_cond = k == 0 && first_frame.defined();
    auto chunk = euler_sample(with_prefix(positive), with_prefix(negative), chunk_noise,
                              c.first_frame_cond ? first_frame : torch::Tensor(), c);
    if (!done.video.defined()) {
      done = chunk;
      continue;
    }
    done.video = torch::cat({done.video, chunk.video}, 2);
    for (auto& [name, s] : done.side) s = torch::cat({s, chunk.side.at(name)}, -1);
  }
  return done;
}

}  // namespace vdt
