// generate_stream: one stream per guidance branch (the conditioned rows, the null row), the rollout over them with
// autograd off, each chunk timed and handed out as it is done. Noise of own conditions: per chunk from the seed.
#include "generate/request.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/fnv1a.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "diffusion/forcing.h"
#include "generate/generation_model.h"
#include "generate/model_inputs.h"
#include "generate/recompute_stream.h"

namespace vdt {
namespace {

void sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A request's own noise: chunk n's video at counter n, its side streams at kSide + n, the conditioning images' at
// kCond; a few-step student's re-noising after step k of chunk n at kStep + 64 n + k (its side streams' at kStepSide).
constexpr uint64_t kSide = 1u << 20, kCond = 1u << 21, kStep = 1u << 22, kStepSide = 1u << 23;

}  // namespace

void GenerationRequest::validate(const Denoiser& model) const {
  const auto& c = conditions;
  VDT_CHECK(c.text.defined() && c.text.dim() == 3 && c.text.size(2) == model.text_dim(),
            "generation: expected text rows [R, Lt, ", model.text_dim(), "], got ",
            c.text.defined() ? c.text.sizes() : at::IntArrayRef{});
  const int64_t R = c.text.size(0);
  for (const int64_t r : c.frame_rows)
    VDT_CHECK(r >= 0 && r < R, "generation: text row ", r, " of ", R, " rows (frame_rows)");
  VDT_CHECK(c.null_row >= -1 && c.null_row < R, "generation: null text row ", c.null_row, " of ", R, " rows");
  VDT_CHECK(c.null_row >= 0 || euler.cfg_scale == 1.0, "--cfg ", euler.cfg_scale,
            " guides against the null prompt, which this request has no text row for: give one, or --cfg 1");
  VDT_CHECK(height >= 1 && width >= 1 && chunk_frames >= 1, "generation: latent grid ", height, " x ", width,
            " in chunks of ", chunk_frames, " frames: expected >= 1 each");
  VDT_CHECK(chunks >= 1, "--chunks ", chunks, ": a stream makes at least one chunk (--chunks 1 or more)");
  VDT_CHECK(!timesteps.empty() || euler.steps >= 1, "--steps ", euler.steps, ": expected at least one step");
  const int64_t C = model.latent_channels();
  VDT_CHECK(!c.first_frame.defined() ||
                (c.first_frame.dim() == 4 && c.first_frame.size(0) == C && c.first_frame.size(1) == 1 &&
                 c.first_frame.size(2) == height && c.first_frame.size(3) == width),
            "generation: expected the first frame [", C, ", 1, ", height, ", ", width, "], got ",
            c.first_frame.defined() ? c.first_frame.sizes() : at::IntArrayRef{});
  for (const auto& [name, latent] : c.cond)
    VDT_CHECK(latent.dim() == 4 && latent.size(0) == C && latent.size(1) == 1, "generation: expected the '", name,
              "' image [", C, ", 1, H, W], got ", latent.sizes());
  VDT_CHECK(cache || window < 0, "--window ", window,
            " belongs to a KV-cache stream (the recompute keeps every chunk)");
}

StreamResult generate_stream(Denoiser& model, const GenerationRequest& q, const StreamHooks& hooks) {
  q.validate(model);
  torch::NoGradGuard ng;
  const EvalScope eval(model);
  const auto device = model.device();
  const auto dtype = model.compute_dtype();
  const auto& c = q.conditions;
  const int64_t cf = q.chunk_frames, C = model.latent_channels();
  const RngStream rs(q.seed, rng_purpose::kCausalSample);
  const uint64_t key = fnv1a64("request");
  auto randn = [&](at::IntArrayRef shape, uint64_t i) {
    auto gen = make_generator(torch::kCPU, rs.u64(key, i));
    return torch::randn(shape, gen, torch::kFloat32).to(device);
  };
  const auto sides = q.side_streams ? model.side_streams() : std::vector<std::string>{};
  StreamSpec spec;
  spec.chunk_frames = cf, spec.height = q.height, spec.width = q.width, spec.chunks = q.chunks;
  spec.window = q.window, spec.sink_chunks = q.sink_chunks, spec.span_chunks = q.span_chunks;
  spec.kernel = q.kernel, spec.graphs = q.graphs, spec.modulation_slots = q.modulation_slots;
  spec.side_streams = sides;
  spec.context = c.text.to(device, dtype);

  struct Branch {
    std::vector<int64_t> rows;                        // per latent frame (past the end: the last)
    torch::Tensor ids(int64_t n, int64_t cf) const {  // [1, cf] rows of chunk n
      std::vector<int64_t> out;
      for (int64_t f = n * cf; f < (n + 1) * cf; ++f)
        out.push_back(rows[static_cast<size_t>(std::min<int64_t>(f, static_cast<int64_t>(rows.size()) - 1))]);
      return torch::tensor(out, torch::kLong).view({1, cf});
    }
  };
  auto open = [&](const Branch& b) -> RolloutBranch {
    StreamSpec s = spec;
    s.prefix_ids = torch::tensor({b.rows[0]}, torch::kLong);
    if (c.text_tags.defined()) s.extra["text_tags"] = c.text_tags.index_select(0, s.prefix_ids).to(device);  // [1, Lt]
    uint64_t cond_i = kCond;
    for (const auto& [name, latent] : c.cond) {
      s.extra[name] = latent.unsqueeze(0).to(device, dtype);  // [1, C, 1, H, W]
      auto it = c.cond_noise.find(name);
      s.extra[name + ".noise"] =
          (it != c.cond_noise.end() ? it->second.view(s.extra[name].sizes()) : randn(s.extra[name].sizes(), cond_i++))
              .to(device, dtype);
    }
    std::unique_ptr<KvStream> stream = q.cache ? model.open_stream(s) : std::make_unique<RecomputeStream>(model, s);
    const auto ctx = spec.context;
    return {std::move(stream), [&model, b, cf, ctx, device](int64_t n, const SampleState& x, const torch::Tensor& t) {
              auto in = model_inputs(model, x.video, t, ctx, b.ids(n, cf), {}, AttentionPattern::block_causal(cf));
              for (const auto& [name, s] : x.side) {
                in.extra[name] = s.to(in.x.scalar_type());
                // the chunk's steps take its first frame's timestep
                in.extra[name + ".t"] = stream_timesteps(t, {0, s.size(-1)}, cf).to(device);
              }
              return in;
            }};
  };
  const bool guided = q.euler.cfg_scale != 1.0;
  RolloutConfig rc;
  rc.grid = rollout_grid(q.euler, q.timesteps), rc.cfg_scale = q.euler.cfg_scale;
  Rollout rollout(open(Branch{c.frame_rows.empty() ? std::vector<int64_t>{0} : c.frame_rows}),
                  guided ? open(Branch{{c.null_row}}) : RolloutBranch{}, rc);

  StreamResult r;
  r.sink_chunks = rollout.stream().spec().sink_chunks, r.window = rollout.stream().spec().kept_window();
  auto noise = hooks.noise ? hooks.noise : ChunkNoiseFn([&](int64_t n) {
    SampleState s{randn({1, C, cf, q.height, q.width}, static_cast<uint64_t>(n)), {}};
    for (const auto& name : sides) {
      const auto [j0, j1] = rollout.stream().side_steps(name, n);
      auto shape = model.side_stream_step_shape(name);
      shape.insert(shape.begin(), 1);
      shape.push_back(j1 - j0);
      s.side[name] = randn(shape, kSide + static_cast<uint64_t>(n));  // [1, ..., steps of the chunk]
    }
    return s;
  });
  StepNoiseFn step_noise;
  if (q.renoise)
    step_noise = [&](int64_t n, int64_t k) {
      const uint64_t i = 64 * static_cast<uint64_t>(n) + static_cast<uint64_t>(k);
      SampleState s{randn({1, C, cf, q.height, q.width}, kStep + i), {}};
      for (const auto& name : sides) {
        const auto [j0, j1] = rollout.stream().side_steps(name, n);
        auto shape = model.side_stream_step_shape(name);
        shape.insert(shape.begin(), 1);
        shape.push_back(j1 - j0);
        s.side[name] = randn(shape, kStepSide + i);
      }
      return s;
    };
  auto t_chunk = std::chrono::steady_clock::now(), t_commit = t_chunk;
  std::vector<torch::Tensor> videos;
  std::map<std::string, std::vector<torch::Tensor>> side_parts;
  const auto first = c.first_frame.defined() ? c.first_frame.unsqueeze(0).to(device, torch::kFloat32) : torch::Tensor();
  sample_stream(
      rollout, q.chunks,
      [&](int64_t n) {
        if (hooks.before_chunk) {
          hooks.before_chunk(n);
          t_chunk = std::chrono::steady_clock::now();  // the hook's work is not the chunk's
        }
        return noise(n);
      },
      first,
      [&](int64_t n, const SampleState& chunk) {
        StreamChunk sc;
        sc.index = n;
        sc.video = chunk.video[0].to(torch::kCPU, torch::kFloat32);  // the copy waits for the chunk
        for (const auto& [name, s] : chunk.side) sc.side[name] = s[0].to(torch::kCPU, torch::kFloat32);
        sc.seconds = since(t_chunk);
        r.chunk_seconds.push_back(sc.seconds);
        r.commit_seconds.push_back(0);
        videos.push_back(sc.video);
        for (const auto& [name, s] : sc.side) side_parts[name].push_back(s);
        if (hooks.on_chunk) hooks.on_chunk(sc);
        t_commit = std::chrono::steady_clock::now();
      },
      /*commit_last=*/false,
      [&](int64_t) {
        sync(device);
        r.commit_seconds.back() = since(t_commit);
        t_chunk = std::chrono::steady_clock::now();  // the next chunk's time starts after the commits
      },
      step_noise);
  r.cache_bytes = rollout.cache_bytes();
  r.graph_replays = rollout.stream().graphs().replays() +
                    (rollout.negative_stream() ? rollout.negative_stream()->graphs().replays() : 0);
  r.sample = torch::cat(videos, 1);
  for (auto& [name, parts] : side_parts) r.side_sample[name] = torch::cat(parts, -1);
  return r;
}

}  // namespace vdt
