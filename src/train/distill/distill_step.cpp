// The distillation step's parts (distill_step.h), transcribed from Self-Forcing's released training code
// (pipeline/self_forcing_training.py: the rollout with the exit index and the clean re-run; model/dmd.py: the
// generator and critic losses) onto one base with LoRA sets and vdt's KV-cached stream (model/kv_stream.h).
#include "train/distill/distill_step.h"

#include <torch/torch.h>

#include "core/error.h"
#include "core/rng_purposes.h"
#include "data/sampler.h"
#include "diffusion/dmd.h"
#include "diffusion/flow_match.h"
#include "diffusion/forcing.h"
#include "model/kv_stream.h"
#include "model/lora.h"
#include "generate/model_inputs.h"
#include "generate/rollout.h"

namespace vdt {
namespace {

// A noise draw's key: (step, rank) and what it is for (the chunk, the rollout's role, the student step, the stream),
// so every draw is its own and none depends on another's order.
uint64_t noise_key(int64_t step, int rank, int64_t chunk, int role, int64_t j, int64_t stream) {
  // bits: stream 0-2, student step 3-6, role 7-8, chunk 9-15, rank 16-31, step 32-63
  return (static_cast<uint64_t>(step) << 32) | (static_cast<uint64_t>(rank) << 16) |
         (static_cast<uint64_t>(chunk) << 9) | (static_cast<uint64_t>(role) << 7) | (static_cast<uint64_t>(j) << 3) |
         static_cast<uint64_t>(stream);
}

// Per-frame model timesteps [1, frames] at t (rounded to the compute dtype when the base's rule says so), on the host.
torch::Tensor frame_timesteps(const DistillRun& r, double t, int64_t frames) {
  const double m = r.round_timestep ? round_timestep(t, r.ctx->dtype) : t;
  return torch::full({1, frames}, m, torch::kFloat32);
}

// The side streams of x (their steps on the last axis) and their timesteps into the model's inputs: a chunk's steps,
// or the whole clip's with its chunk bounds.
void add_side(DenoiserInputs& in, const SampleState& x, const torch::Tensor& t, const std::vector<int64_t>& bounds,
              int64_t chunk_frames, const std::string& name) {
  in.extra[name] = x.side.at(name).to(in.x.scalar_type());
  in.extra[name + ".t"] = stream_timesteps(t, bounds, chunk_frames).to(in.x.device());
}

SampleState renoise(DistillRun& r, const SampleState& x0, double sigma, int64_t step, int64_t chunk, int role,
                    int64_t j) {
  SampleState out;
  auto noise = [&](const torch::Tensor& like, int64_t s) {
    return r.ctx->noise(like, r.cfg.random.seed, rng_purpose::kDistillNoise,
                        noise_key(step, r.ctx->rank, chunk, role, j, s));
  };
  const auto sig = torch::tensor(sigma, torch::kFloat32);
  out.video =
      add_noise(x0.video.to(torch::kFloat32), noise(x0.video, 0).to(torch::kFloat32), sig).to(x0.video.scalar_type());
  int64_t s = 1;
  for (const auto& [name, v] : x0.side)
    out.side[name] = add_noise(v.to(torch::kFloat32), noise(v, s++).to(torch::kFloat32), sig).to(v.scalar_type());
  return out;
}

}  // namespace

DistillWindow distill_window(DistillRun& r, int64_t g, int64_t frames, int64_t val) {
  const auto& ds = *r.ds;
  CausalSample s;
  if (val >= 0) {
    s = ds.load(ds.val().at(static_cast<size_t>(val)), ds.val_start(val));
  } else {
    const int64_t n = static_cast<int64_t>(ds.train().size());
    const int64_t epoch = g / n;
    if (epoch != r.perm_epoch) r.perm = epoch_permutation(r.cfg.random.seed, epoch, n), r.perm_epoch = epoch;
    const int64_t index = r.perm[static_cast<size_t>(g % n)];
    s = ds.load(ds.train()[static_cast<size_t>(index)], ds.train_start(index, epoch));
  }
  VDT_CHECK(static_cast<int64_t>(s.text_rows.size()) >= frames, "distill: the window has ", s.text_rows.size(),
            " frames of text, the rollout makes ", frames);
  DistillWindow w;
  w.id = s.clip_id + "@" + std::to_string(s.start);
  const std::vector<int64_t> rows(s.text_rows.begin(), s.text_rows.begin() + frames);
  ds.text_of(rows, &w.context, &w.context_ids, &w.tags);  // [R, Lt, text_dim], [1, frames], [R, Lt]
  const int64_t null_row = ds.text_table()->row_of(ds.info().null_prompt);
  ds.text_of(std::vector<int64_t>(static_cast<size_t>(frames), null_row), &w.null_context, &w.null_ids, &w.null_tags);
  const auto dev = r.ctx->device;
  for (const auto& [name, latent] : s.cond) {  // clean conditioning latents get their own noise, fixed per window
    w.cond[name] = latent;
    w.cond_noise[name] =
        r.ctx->noise(latent.unsqueeze(0).to(dev, r.ctx->dtype), r.cfg.random.seed, rng_purpose::kDistillNoise,
                     noise_key(g, 0, 127, 3, 15, 7));  // keyed by the window
  }
  for (const auto& name : r.model->side_streams()) {
    auto it = s.streams.find(name);
    if (it == s.streams.end()) continue;  // the root has none: the base runs without it
    const auto bounds = r.model->side_stream_chunks(name, frames, r.cfg.chunk_frames);
    std::vector<int64_t> shape(it->second.sizes().begin(), it->second.sizes().end());
    shape.insert(shape.begin(), 1);
    shape.back() = bounds.back();
    w.side_shape[name] = shape;
  }
  return w;
}

SampleState student_rollout(DistillRun& r, const DistillWindow& w, const DistillDraws& d, bool with_grad, int64_t step,
                            int role, RolloutTrace* trace) {
  auto& model = *r.model;
  const auto dev = r.ctx->device;
  const auto dtype = r.ctx->dtype;
  const int64_t cf = r.cfg.chunk_frames, frames = d.chunks * cf;
  const auto& info = r.ds->info();
  StreamSpec spec;
  spec.chunk_frames = cf, spec.height = info.latent_h, spec.width = info.latent_w, spec.chunks = d.chunks;
  spec.span_chunks = d.chunks;
  spec.context = w.context.to(dev, dtype);
  spec.prefix_ids = w.context_ids.narrow(1, 0, 1).reshape({1});
  for (const auto& [name, shape] : w.side_shape) spec.side_streams.push_back(name);
  DenoiserInputs probe;  // the window's family conditioning (H3: Picture 1 and its noise, the prompt's tags)
  probe.x =
      torch::zeros({1, info.latent_channels, frames, info.latent_h, info.latent_w}, torch::dtype(dtype).device(dev));
  add_window_conditioning(probe, w.tags, w.context_ids, w.cond, w.cond_noise);
  spec.extra = probe.extra;
  std::unique_ptr<KvStream> stream;
  {
    torch::NoGradGuard ng;  // the prefix (H3's text and Picture 1) is context: no gradient
    stream = model.open_stream(spec);
  }
  std::map<std::string, std::vector<int64_t>> bounds;
  for (const auto& [name, shape] : w.side_shape) bounds[name] = model.side_stream_chunks(name, frames, cf);
  // The generation layer's rollout (generate/rollout.h) on the student's steps: t [1, cf] at the step's level, on the
  // host (rounded to the compute dtype where the base's rule says so), where the model's inputs find its rows.
  RolloutBranch student;
  student.stream = std::move(stream);
  student.inputs = [&](int64_t n, const SampleState& x, const torch::Tensor& t) {
    const auto tt = frame_timesteps(r, t.select(0, 0)[0].item<double>(), cf);
    auto in = model_inputs(model, x.video, tt, w.context, w.context_ids.narrow(1, n * cf, cf), {},
                           AttentionPattern::block_causal(cf));
    for (const auto& [name, s] : x.side) add_side(in, x, tt, {0, s.size(-1)}, cf, name);
    return in;
  };
  Rollout rollout(std::move(student), {}, {rollout_grid({}, r.student_t), 1.0});
  auto noise_of = [&](int64_t n, int64_t j) {  // chunk n's draw for student step j + 1 (j = 15: the first step's)
    SampleState zero;
    zero.video =
        torch::zeros({1, info.latent_channels, cf, info.latent_h, info.latent_w}, torch::dtype(dtype).device(dev));
    for (const auto& [name, shape] : w.side_shape) {
      auto sh = shape;
      sh.back() = bounds[name][n + 1] - bounds[name][n];
      zero.side[name] = torch::zeros(sh, torch::dtype(dtype).device(dev));
    }
    return renoise(r, zero, 1.0, step, n, role, j);  // sigma 1: the draw itself
  };
  std::vector<torch::Tensor> video;
  std::map<std::string, std::vector<torch::Tensor>> side;
  for (int64_t n = 0; n < d.chunks; ++n) {
    // Self-Forcing: the steps up to the exit, each next level from the clean prediction and fresh noise; autograd on
    // the exit step alone.
    ChunkPlan plan;
    plan.last_step = d.exit_index;
    if (with_grad) plan.grad_steps = {d.exit_index};
    plan.renoise = [&, n](int64_t j) { return noise_of(n, j); };
    const auto x0 = rollout.run_chunk(noise_of(n, 15), plan).x0;
    video.push_back(x0.video);
    for (const auto& [name, s] : x0.side) side[name].push_back(s);
    if (trace) trace->chunks.push_back(x0);
    if (n + 1 == d.chunks) break;
    // The clean re-run at the context level (timestep 0), committed without gradients: the paper's detached history.
    torch::NoGradGuard ng;
    SampleState clean;
    clean.video = x0.video.detach();
    for (const auto& [name, s] : x0.side) clean.side[name] = s.detach();
    rollout.commit(clean, 0.0);
  }
  if (trace) {
    auto& cache = rollout.stream().cache();
    for (size_t i = 0; i < cache.segments().size(); ++i) {
      if (cache.segments()[i].chunk < 0) continue;  // the prefix
      trace->committed_keys.emplace_back();
      for (int64_t b = 0; b < cache.blocks(); ++b) trace->committed_keys.back().push_back(cache.keys(b, i).clone());
    }
  }
  SampleState out;
  out.video = torch::cat(video, 2);  // chunks x [1, C, cf, H, W] -> [1, C, F, H, W]
  for (auto& [name, parts] : side) out.side[name] = torch::cat(parts, -1);  // steps last
  return out;
}

SampleState clean_prediction(DistillRun& r, const std::string& set, const DistillWindow& w, const SampleState& x_t,
                             double t, bool uncond) {
  auto& model = *r.model;
  const int64_t cf = r.cfg.chunk_frames, frames = x_t.video.size(2);
  const auto tt = frame_timesteps(r, t, frames);
  const auto pattern = r.cfg.all_causal ? AttentionPattern::block_causal(cf) : AttentionPattern::bidirectional();
  const auto& ctx = uncond ? w.null_context : w.context;
  const auto& ids = uncond ? w.null_ids : w.context_ids;
  auto in = model_inputs(model, x_t.video, tt, ctx, ids, {}, pattern);
  add_window_conditioning(in, uncond ? w.null_tags : w.tags, ids, w.cond, w.cond_noise);
  for (const auto& [name, s] : x_t.side) add_side(in, x_t, tt, model.side_stream_chunks(name, frames, cf), cf, name);
  ActiveLora role(model, set);
  DenoiserAux aux;
  const auto v = model.forward(in, x_t.side.empty() ? nullptr : &aux);
  const double sigma = t / 1000.0;
  SampleState x0;
  x0.video = x0_from_velocity(in.x, v, sigma);
  for (const auto& [name, s] : x_t.side)
    x0.side[name] = x0_from_velocity(in.extra.at(name), aux.streams.at(name), sigma);
  return x0;
}

namespace {
// x noised to sigma with the update's own noise (purpose: DMD or critic), no graph.
std::pair<SampleState, SampleState> noised(DistillRun& r, const SampleState& x, double sigma, uint32_t purpose,
                                           int64_t step) {
  SampleState x_t, noise;
  const auto sig = torch::tensor(sigma, torch::kFloat32);
  auto one = [&](const torch::Tensor& v, int64_t s) {
    const auto e = r.ctx->noise(v, r.cfg.random.seed, purpose, noise_key(step, r.ctx->rank, 0, 0, 0, s));
    return std::pair{add_noise(v.detach().to(torch::kFloat32), e.to(torch::kFloat32), sig).to(v.scalar_type()), e};
  };
  std::tie(x_t.video, noise.video) = one(x.video, 0);
  int64_t s = 1;
  for (const auto& [name, v] : x.side) std::tie(x_t.side[name], noise.side[name]) = one(v, s++);
  return {x_t, noise};
}
}  // namespace

UpdateStats student_loss_backward(DistillRun& r, int64_t step, const DistillDraws& d) {
  const int64_t g = ((step - 1) * r.ctx->world + r.ctx->rank) * 2 + 1;  // the student's prompt window
  const auto w = distill_window(r, g, d.chunks * r.cfg.chunk_frames);
  ActiveLora student(*r.model, kStudentSet);
  // 1) the rollout, the exit steps with gradients
  const auto x = student_rollout(r, w, d, /*with_grad=*/true, step, 0);
  // 2) noised to the DMD timestep; the teacher's (guided) and the critic's clean predictions, no graph
  const double t = d.dmd_timestep;
  SampleState real, fake;
  {
    torch::NoGradGuard ng;
    const auto x_t = noised(r, x, t / 1000.0, rng_purpose::kDistillDmdNoise, step).first;
    real = clean_prediction(r, r.teacher_role, w, x_t, t, false);
    if (r.teacher_cfg != 1.0) {
      const auto u = clean_prediction(r, r.teacher_role, w, x_t, t, true);
      real.video = guided(real.video, u.video, r.teacher_cfg);
      for (auto& [name, v] : real.side) v = guided(v, u.side.at(name), r.teacher_cfg);
    }
    fake = clean_prediction(r, kCriticSet, w, x_t, t, false);
  }
  // 3) the DMD loss of the video and of each side stream; backward under the student's set (a checkpointed block's
  // recompute runs the set active now)
  auto dmd = dmd_loss(x.video, fake.video, real.video);
  UpdateStats st;
  st.loss = dmd.loss;
  auto norm2 = dmd.grad_norm.square();
  for (const auto& [name, v] : x.side) {
    const auto ds = dmd_loss(v, fake.side.at(name), real.side.at(name));
    st.loss = st.loss + ds.loss, norm2 = norm2 + ds.grad_norm.square();
  }
  st.dmd_grad_norm = norm2.sqrt().to(torch::kFloat32);
  st.loss.backward();
  st.loss = st.loss.detach().to(torch::kFloat32);
  return st;
}

UpdateStats critic_loss_backward(DistillRun& r, int64_t step, const DistillDraws& d) {
  const int64_t g = ((step - 1) * r.ctx->world + r.ctx->rank) * 2;  // the critic's prompt window
  const auto w = distill_window(r, g, d.chunks * r.cfg.chunk_frames);
  SampleState x;
  {
    torch::NoGradGuard ng;
    ActiveLora student(*r.model, kStudentSet);
    x = student_rollout(r, w, d, /*with_grad=*/false, step, 1);
  }
  const double t = d.critic_timestep, sigma = t / 1000.0;
  const auto [x_t, noise] = noised(r, x, sigma, rng_purpose::kDistillCriticNoise, step);
  ActiveLora critic(*r.model, kCriticSet);
  const auto pred = clean_prediction(r, kCriticSet, w, x_t, t, false);
  UpdateStats st;
  st.loss = critic_flow_loss(x_t.video, pred.video, x.video, noise.video, sigma);
  for (const auto& [name, v] : x.side)
    st.loss = st.loss + critic_flow_loss(x_t.side.at(name), pred.side.at(name), v, noise.side.at(name), sigma);
  st.loss.backward();
  st.loss = st.loss.detach();
  return st;
}

}  // namespace vdt
