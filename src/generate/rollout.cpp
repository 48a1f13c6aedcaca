// The rollout: per step one guided evaluation per branch (euler_sample's order of operations, so a sampled stream
// equals the recompute sampler's), the state moved in the mode of its step, the commit a pass of its own.
#include "generate/rollout.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/error.h"

namespace vdt {

FlowGrid rollout_grid(const EulerConfig& cfg, const std::vector<double>& timesteps) {
  if (timesteps.empty()) return inference_grid(cfg.steps, cfg.shift, cfg.denoising_strength);
  for (size_t i = 0; i < timesteps.size(); ++i) {
    VDT_CHECK(timesteps[i] > 0 && timesteps[i] <= 1000, "rollout: timestep ", timesteps[i],
              " is outside (0, 1000]: a step list names noise levels of the 1000-step scale");
    VDT_CHECK(i == 0 || timesteps[i] < timesteps[i - 1], "rollout: the step list must decrease, but ", timesteps[i],
              " follows ", timesteps[i - 1]);
  }
  FlowGrid g;
  g.timesteps = torch::tensor(timesteps, torch::kFloat32);
  g.sigmas = g.timesteps / 1000;
  return g;
}

Rollout::Rollout(RolloutBranch positive, RolloutBranch negative, RolloutConfig cfg)
    : positive_(std::move(positive)), negative_(std::move(negative)), cfg_(std::move(cfg)) {
  VDT_CHECK(positive_.stream && positive_.inputs, "rollout: the conditioned branch needs a stream and its inputs");
  VDT_CHECK(!negative_.stream || negative_.inputs, "rollout: the negative branch needs its inputs");
  VDT_CHECK(negative_.stream || cfg_.cfg_scale == 1.0, "rollout: guidance ", cfg_.cfg_scale,
            " needs a negative branch (or guidance 1)");
  VDT_CHECK(cfg_.grid.sigmas.defined() && cfg_.grid.sigmas.dim() == 1 && cfg_.grid.sigmas.size(0) >= 1 &&
                cfg_.grid.timesteps.sizes() == cfg_.grid.sigmas.sizes(),
            "rollout: the grid needs at least one step (rollout_grid)");
  VDT_CHECK(!negative_.stream || (negative_.stream->chunks_done() == positive_.stream->chunks_done() &&
                                  negative_.stream->spec().chunk_frames == positive_.stream->spec().chunk_frames),
            "rollout: the branches' streams differ in chunks done or chunk frames");
}

SampleState Rollout::evaluate(RolloutBranch& b, const SampleState& x, const torch::Tensor& t) {
  DenoiserAux aux;
  SampleState v{b.stream->forward(b.inputs(b.stream->chunks_done(), x, t), &aux).to(torch::kFloat32), {}};
  for (const auto& [name, s] : x.side) {
    auto it = aux.streams.find(name);
    VDT_CHECK(it != aux.streams.end(), "rollout: the stream predicted no '", name, "' side stream");
    v.side[name] = it->second.to(torch::kFloat32);
  }
  return v;
}

Rollout::Prediction Rollout::predict(const SampleState& x, int64_t k, bool first_frame, bool grad) {
  VDT_CHECK(k >= 0 && k < steps(), "rollout: step ", k, " of a ", steps(), "-step grid");
  VDT_CHECK(x.video.dim() == 5, "rollout: expected the chunk [B, C, cf, H, W], got ", x.video.sizes());
  torch::AutoGradMode mode(grad);
  const double sigma = cfg_.grid.sigmas[k].item<double>();
  const int64_t B = x.video.size(0), F = x.video.size(2);
  auto t = torch::full({B, F}, cfg_.grid.timesteps[k].item<double>(), x.video.options().dtype(torch::kFloat32));
  if (first_frame) t.select(1, 0).zero_();
  Prediction p{evaluate(positive_, x, t), {}};
  if (negative_.stream) {
    const auto vn = evaluate(negative_, x, t);
    auto& v = p.velocity;
    v.video = vn.video + cfg_.cfg_scale * (v.video - vn.video);
    for (auto& [name, s] : v.side) s = vn.side.at(name) + cfg_.cfg_scale * (s - vn.side.at(name));
  }
  p.x0.video = x.video - sigma * p.velocity.video;
  for (const auto& [name, s] : x.side) p.x0.side[name] = s - sigma * p.velocity.side.at(name);
  return p;
}

ChunkResult Rollout::run_chunk(const SampleState& noise, const ChunkPlan& plan) {
  const int64_t last = plan.last_step < 0 ? steps() - 1 : plan.last_step;
  VDT_CHECK(last < steps(), "rollout: last step ", plan.last_step, " of a ", steps(), "-step grid");
  for (const int64_t k : plan.grad_steps)
    VDT_CHECK(k >= 0 && k <= last, "rollout: step ", k, " runs with autograd but the chunk runs steps 0 to ", last);
  auto grad_at = [&](int64_t k) {
    return std::find(plan.grad_steps.begin(), plan.grad_steps.end(), k) != plan.grad_steps.end();
  };
  const auto& ff = plan.first_frame;
  VDT_CHECK(!ff.defined() || (ff.dim() == 5 && ff.size(2) == 1),
            "rollout: the first frame must be [B, C, 1, H, W], got ", ff.sizes());
  ChunkResult r;
  {
    torch::AutoGradMode mode(grad_at(0));
    r.x.video = noise.video.to(torch::kFloat32).clone();
    for (const auto& [name, s] : noise.side) r.x.side[name] = s.to(torch::kFloat32).clone();
    if (ff.defined()) r.x.video.slice(2, 0, 1).copy_(ff);
  }
  auto& x = r.x;
  for (int64_t k = 0; k <= last; ++k) {
    const bool grad = grad_at(k);
    auto p = predict(x, k, ff.defined(), grad);
    torch::AutoGradMode mode(grad);  // the move to the next level belongs to this step's graph
    const double sigma = cfg_.grid.sigmas[k].item<double>();
    const double sigma_next = k + 1 < steps() ? cfg_.grid.sigmas[k + 1].item<double>() : 0.0;
    r.x0 = p.x0;
    if (ff.defined())
      r.x0.video = torch::cat({ff.to(torch::kFloat32), r.x0.video.narrow(2, 1, r.x0.video.size(2) - 1)}, 2);
    if (plan.renoise && k + 1 < steps()) {
      const auto n = plan.renoise(k);
      x.video = (1 - sigma_next) * r.x0.video + sigma_next * n.video.to(torch::kFloat32);
      for (auto& [name, s] : x.side) s = (1 - sigma_next) * r.x0.side.at(name) + sigma_next * n.side.at(name);
    } else {
      x.video = x.video + p.velocity.video.to(x.video.scalar_type()) * (sigma_next - sigma);
      for (auto& [name, s] : x.side) s = s + p.velocity.side.at(name).to(s.scalar_type()) * (sigma_next - sigma);
    }
    if (ff.defined()) x.video.slice(2, 0, 1).copy_(ff);
  }
  return r;
}

void Rollout::commit(const SampleState& clean, double timestep) {
  VDT_CHECK(clean.video.dim() == 5, "rollout: expected the clean chunk [B, C, cf, H, W], got ", clean.video.sizes());
  const auto t = torch::full({clean.video.size(0), clean.video.size(2)}, timestep, torch::kFloat32);
  for (auto* b : {&positive_, &negative_}) {
    if (!b->stream) continue;
    torch::AutoGradMode mode(b->stream->spec().keep_history_graph && torch::GradMode::is_enabled());
    b->stream->commit(b->inputs(b->stream->chunks_done(), clean, t));
  }
}

int64_t Rollout::cache_bytes() const {
  return positive_.stream->cache_bytes() + (negative_.stream ? negative_.stream->cache_bytes() : 0);
}

void sample_stream(Rollout& rollout, int64_t chunks, const ChunkNoiseFn& noise, const torch::Tensor& first_frame,
                   const ChunkDoneFn& on_chunk, bool commit_last, const std::function<void(int64_t n)>& on_commit,
                   const StepNoiseFn& step_noise) {
  VDT_CHECK(chunks >= 1, "--chunks ", chunks, ": a stream makes at least one chunk");
  torch::NoGradGuard ng;
  const int64_t first = rollout.chunks_done();
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t n = first + i;
    ChunkPlan plan;
    if (i == 0) plan.first_frame = first_frame;
    if (step_noise) plan.renoise = [&step_noise, n](int64_t k) { return step_noise(n, k); };
    const auto chunk = rollout.run_chunk(noise(n), plan).x;
    if (on_chunk) on_chunk(n, chunk);
    if (i + 1 == chunks && !commit_last) break;
    rollout.commit(chunk);
    if (on_commit) on_commit(n);
  }
}

}  // namespace vdt
