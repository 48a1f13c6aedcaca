// Sampling. Both branches see the same noise and the same first frame; only the conditions differ.
#include "train/eval/sampling.h"

#include <torch/torch.h>

#include <array>

#include "core/rng.h"
#include "core/error.h"
#include "core/rng_purposes.h"
#include "diffusion/forcing.h"
#include "train/loop/model_inputs.h"
#include "train/eval/validation.h"

namespace vdt {
namespace {

// eval() for the sample, the caller's mode back afterwards (a trainer's previews sample between training steps).
struct EvalMode {
  Denoiser& model;
  const bool was_training;
  explicit EvalMode(Denoiser& m) : model(m), was_training(m.is_training()) { model.eval(); }
  ~EvalMode() {
    if (was_training) model.train();
  }
};

}  // namespace

SampleResult sample_clip(Denoiser& model, const SftDataset& ds, size_t index, const EulerConfig& cfg, uint64_t seed,
                         const std::string* prompt) {
  torch::NoGradGuard ng;
  const EvalMode mode(model);
  const auto device = model.device();
  const auto& table = *ds.text_table();
  auto branch = [&](const SftSample& s) -> VelocityFn {
    auto b = std::make_shared<SftBatch>(collate({s}, table));
    return [&model, b](const torch::Tensor& x, const torch::Tensor& t) {
      return model.forward(model_inputs(model, x, t, b->context, b->context_ids, b->ids)).to(torch::kFloat32);
    };
  };
  auto cond = ds.get_with(index, false, false);
  if (prompt) cond.text_rows.assign(cond.text_rows.size(), table.row_of(*prompt));  // every cell: the new prompt
  const auto uncond = ds.get_with(index, true, true);
  auto x0 = cond.latents.unsqueeze(0).to(device, torch::kFloat32);  // [1, C, F, H, W]
  auto gen = make_generator(torch::kCPU, RngStream(seed, rng_purpose::kSample).u64(fnv1a64(cond.clip_id), 0));
  auto noise = torch::randn(x0.sizes(), gen, torch::kFloat32).to(device);
  auto first = x0.slice(2, 0, 1);
  SampleResult r;
  r.clip_id = cond.clip_id;
  r.ground_truth = x0[0].cpu();
  r.conditioned = euler_sample(branch(cond), branch(uncond), noise, first, cfg)[0].cpu();
  r.unconditioned = euler_sample(branch(uncond), {}, noise, first, cfg)[0].cpu();
  return r;
}

CausalSampleResult sample_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                        const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                        const std::string* prompt) {
  torch::NoGradGuard ng;
  const EvalMode mode(model);
  const auto device = model.device();
  const auto w = ds.load(ds.val().at(index), ds.val_start(static_cast<int64_t>(index)));
  const uint64_t key = fnv1a64(w.clip_id + "@" + std::to_string(w.start));
  const RngStream rs(seed, rng_purpose::kCausalSample);
  auto noise_like = [&](const torch::Tensor& like, uint64_t i) {  // i: 0 video, 1 conditioning, 2.. side streams
    auto gen = make_generator(torch::kCPU, rs.u64(key, i));
    return torch::randn(like.sizes(), gen, torch::kFloat32).to(device);
  };
  SampleState x0{w.latents.unsqueeze(0).to(device, torch::kFloat32), {}};  // video [1, C, span, H, W]
  SampleState noise{noise_like(x0.video, 0), {}};
  std::map<std::string, torch::Tensor> cond_noise;  // fixed over the steps, as in training
  for (const auto& [name, latent] : w.cond) cond_noise[name] = noise_like(latent.unsqueeze(0), 1);
  SideBounds bounds;
  uint64_t stream_i = 2;
  for (const auto& name : model.side_streams()) {
    auto it = w.streams.find(name);
    if (it == w.streams.end()) continue;  // the root has none: the base runs without it
    bounds[name] = model.side_stream_chunks(name, x0.video.size(2), chunk_frames);
    x0.side[name] = it->second.unsqueeze(0).to(device, torch::kFloat32);  // [1, ..., A]
    noise.side[name] = noise_like(x0.side[name], stream_i++);
  }
  auto branch = [&](const std::vector<int64_t>& rows) -> StateVelocityFn {
    auto text = std::make_shared<std::array<torch::Tensor, 3>>();  // context, context_ids, tags
    ds.text_of(rows, &(*text)[0], &(*text)[1], &(*text)[2]);       // [R, Lt, text_dim], [1, span], [R, Lt]
    return [&model, &w, &cond_noise, text, chunk_frames](const SampleState& x, const torch::Tensor& t) {
      const int64_t frames = x.video.size(2);  // the chunks sampled so far and the one being sampled
      auto in = model_inputs(model, x.video, t, (*text)[0], (*text)[1].narrow(1, 0, frames), {},
                             AttentionPattern::block_causal(chunk_frames));
      add_window_conditioning(in, (*text)[2], (*text)[1], w.cond, cond_noise);
      for (const auto& [name, s] : x.side) {
        const auto b = model.side_stream_chunks(name, frames, chunk_frames);
        VDT_CHECK(b.back() == s.size(-1), "causal sampling: the ", name, " stream has ", s.size(-1), " steps, ", frames,
                  " frames need ", b.back());
        in.extra[name] = s.to(in.x.scalar_type());
        in.extra[name + ".t"] = stream_timesteps(t, b, chunk_frames).to(in.x.device());
      }
      DenoiserAux aux;
      SampleState v{model.forward(in, x.side.empty() ? nullptr : &aux).to(torch::kFloat32), {}};
      for (const auto& [name, s] : x.side) v.side[name] = aux.streams.at(name).to(torch::kFloat32);
      return v;
    };
  };
  const int64_t null_row = ds.text_table()->row_of(ds.info().null_prompt);
  const auto sample = causal_euler_sample(
      branch(prompt ? std::vector<int64_t>(w.text_rows.size(), ds.text_table()->row_of(*prompt)) : w.text_rows),
      cfg.cfg_scale != 1.0 ? branch(std::vector<int64_t>(w.text_rows.size(), null_row)) : StateVelocityFn(), noise,
      bounds, clean_first_frame ? x0.video.slice(2, 0, 1) : torch::Tensor(), chunk_frames, cfg);
  CausalSampleResult r;
  r.clip_id = w.clip_id, r.start = w.start;
  r.ground_truth = x0.video[0].cpu();
  r.sample = sample.video[0].cpu();
  for (const auto& [name, s] : sample.side) {
    r.side_sample[name] = s[0].cpu();
    r.side_ground_truth[name] = x0.side.at(name)[0].cpu();
  }
  return r;
}

}  // namespace vdt
