// Streaming a val window: the same noise, text and conditioning as sample_causal_window (train/eval/sampling.cpp)
// inside the span, so the two agree when nothing leaves the cache.
#include "train/eval/stream_sampling.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <array>
#include <chrono>

#include "core/error.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "diffusion/forcing.h"
#include "generate/rollout.h"
#include "model/kv_stream.h"
#include "model/lora.h"
#include "model/pass_graph.h"
#include "train/eval/validation.h"
#include "distributed/fp8_blocks.h"
#include "train/loop/model_inputs.h"

namespace vdt {
namespace {

// Noise of chunks past the window's span: stream index kPastSpan + chunk (0, 1 and 2.. are the span's video,
// conditioning and side streams, as sample_causal_window draws them).
constexpr uint64_t kPastSpan = 1u << 20;

void sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const std::vector<ConfigField<StreamSpeed>>& StreamSpeed::fields() {
  using C = StreamSpeed;
  static const std::vector<ConfigField<C>> f = {
      {"--fp8",
       "FP8 GEMMs in the blocks (all but the first and last; their weights held quantized): off, on, or fast "
       "(fast accumulation); a GPU of compute capability 8.9+",
       &C::fp8},
      {"--cuda-graphs",
       "each pass's block loop recorded once and replayed as a CUDA graph: auto (on for a CUDA "
       "device), on, off",
       &C::cuda_graphs},
      {"--merge-lora",
       "the LoRA folded into the base weights once before the stream (W + scale B A, rounded to the "
       "weights' dtype; no factor GEMMs in the passes): on, or off (the factors run beside the base)",
       &C::merge_lora},
  };
  return f;
}

bool apply_stream_speed(Denoiser& model, const StreamSpeed& speed) {
  const auto graphs = parse_graph_mode(speed.cuda_graphs, "--cuda-graphs");
  const auto fp8 = parse_fp8(speed.fp8, "--fp8");
  VDT_CHECK(fp8 != Fp8Mode::emulate, "--fp8 emulate is for training checks; streaming takes --fp8 off, on or fast");
  check_fp8_device(fp8, model.device(), "--fp8");
  VDT_CHECK(speed.merge_lora == "on" || speed.merge_lora == "off", "--merge-lora '", speed.merge_lora,
            "': expected on (the LoRA folded into the base weights) or off (the factors run beside them)");
  if (speed.merge_lora == "on") merge_attached_lora(model);  // before FP8 holds the frozen weights quantized
  if (fp8 != Fp8Mode::off)
    enable_fp8_linears(model, fp8, fp8_block_indices(static_cast<int64_t>(model.block_modules().size())),
                       /*hold_frozen=*/true);
  return graphs_wanted(graphs, model.device(), "--cuda-graphs");
}

StreamResult stream_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                  const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                  const StreamOptions& opts, const std::function<void(const StreamChunk&)>& on_chunk,
                                  const std::string* prompt) {
  torch::NoGradGuard ng;
  const bool was_training = model.is_training();
  model.eval();
  struct Restore {
    Denoiser& m;
    bool on;
    ~Restore() {
      if (on) m.train();
    }
  } restore{model, was_training};
  const auto device = model.device();
  const auto w = ds.load(ds.val().at(index), ds.val_start(static_cast<int64_t>(index)));
  const int64_t span = w.latents.size(1), cf = chunk_frames;
  VDT_CHECK(cf >= 1 && span % cf == 0, "stream: a window of ", span, " latent frames does not split into chunks of ",
            cf);
  const int64_t chunks = opts.chunks > 0 ? opts.chunks : span / cf;
  const uint64_t key = fnv1a64(w.clip_id + "@" + std::to_string(w.start));
  const RngStream rs(seed, rng_purpose::kCausalSample);
  auto randn = [&](at::IntArrayRef shape, uint64_t i) {
    auto gen = make_generator(torch::kCPU, rs.u64(key, i));
    return torch::randn(shape, gen, torch::kFloat32).to(device);
  };
  // The span's draws as sample_causal_window makes them (video 0, conditioning 1, side streams 2..).
  const auto x0 = w.latents.unsqueeze(0).to(device, torch::kFloat32);  // [1, C, span, H, W]
  const auto span_noise = randn(x0.sizes(), 0);
  std::map<std::string, torch::Tensor> cond_noise;
  for (const auto& [name, latent] : w.cond) cond_noise[name] = randn(latent.unsqueeze(0).sizes(), 1);
  std::map<std::string, torch::Tensor> side_x0, side_noise;
  uint64_t stream_i = 2;
  for (const auto& name : model.side_streams()) {
    auto it = w.streams.find(name);
    if (it == w.streams.end()) continue;
    side_x0[name] = it->second.unsqueeze(0).to(device, torch::kFloat32);  // [1, ..., A]
    side_noise[name] = randn(side_x0[name].sizes(), stream_i++);
  }

  // One stream per guidance branch, each with its text.
  StreamSpec spec;
  spec.chunk_frames = cf, spec.height = x0.size(3), spec.width = x0.size(4), spec.chunks = chunks;
  spec.window = opts.window, spec.sink_chunks = opts.sink_chunks, spec.span_chunks = opts.span_chunks;
  spec.kernel = opts.kernel, spec.graphs = opts.graphs, spec.modulation_slots = opts.modulation_slots;
  for (const auto& [name, s] : side_x0) spec.side_streams.push_back(name);
  struct Branch {
    std::unique_ptr<KvStream> stream;
    torch::Tensor context, ids;  // [R, Lt, text_dim], [1, span]
  };
  auto open = [&](const std::vector<int64_t>& rows) {
    Branch b;
    torch::Tensor tags;
    ds.text_of(rows, &b.context, &b.ids, &tags);
    StreamSpec s = spec;
    s.context = b.context.to(device, model.compute_dtype());
    s.prefix_ids = b.ids.narrow(1, 0, 1).reshape({1});
    DenoiserInputs probe;  // the window's family conditioning (H3: Picture 1 and its noise, the prompt's tags)
    probe.x = x0.to(model.compute_dtype());
    add_window_conditioning(probe, tags, b.ids, w.cond, cond_noise);
    s.extra = probe.extra;
    b.stream = model.open_stream(s);
    return b;
  };
  const int64_t null_row = ds.text_table()->row_of(ds.info().null_prompt);
  Branch pos = open(prompt ? std::vector<int64_t>(w.text_rows.size(), ds.text_table()->row_of(*prompt)) : w.text_rows);
  Branch neg;
  if (cfg.cfg_scale != 1.0) neg = open(std::vector<int64_t>(w.text_rows.size(), null_row));

  auto chunk_ids = [&](const Branch& b, int64_t n) {  // [1, cf] text rows of chunk n (past the span: the last)
    std::vector<int64_t> ids;
    auto host = b.ids.to(torch::kCPU, torch::kLong).contiguous();
    for (int64_t f = n * cf; f < (n + 1) * cf; ++f) ids.push_back(host[0][std::min(f, span - 1)].item<int64_t>());
    return torch::tensor(ids, torch::kLong).view({1, cf});
  };
  auto inputs = [&](const Branch& b, int64_t n, const SampleState& x, const torch::Tensor& t) {
    auto in = model_inputs(model, x.video, t, b.context, chunk_ids(b, n), {}, AttentionPattern::block_causal(cf));
    for (const auto& [name, s] : x.side) {
      in.extra[name] = s.to(in.x.scalar_type());
      const int64_t A = s.size(-1);
      in.extra[name + ".t"] = stream_timesteps(t, {0, A}, cf).to(device);  // the chunk's steps take its first frame's
    }
    return in;
  };
  auto branch = [&](Branch& b) -> RolloutBranch {
    if (!b.stream) return {};
    const Branch* bp = &b;
    return {std::move(b.stream),
            [&, bp](int64_t n, const SampleState& x, const torch::Tensor& t) { return inputs(*bp, n, x, t); }};
  };
  StreamResult r;
  r.clip_id = w.clip_id, r.start = w.start;
  r.sink_chunks = pos.stream->spec().sink_chunks, r.window = pos.stream->spec().kept_window();
  RolloutConfig rc;
  rc.grid = rollout_grid(cfg), rc.cfg_scale = neg.stream ? cfg.cfg_scale : 1.0;
  Rollout rollout(branch(pos), branch(neg), rc);
  auto t_chunk = std::chrono::steady_clock::now();
  auto noise = [&](int64_t n) {
    SampleState s;
    s.video = n * cf < span ? span_noise.narrow(2, n * cf, cf)
                            : randn({1, x0.size(1), cf, x0.size(3), x0.size(4)}, kPastSpan + static_cast<uint64_t>(n));
    for (const auto& [name, sn] : side_noise) {
      const auto [j0, j1] = rollout.stream().side_steps(name, n);
      auto shape = sn.sizes().vec();
      shape.back() = j1 - j0;
      s.side[name] =
          j1 <= sn.size(-1) ? sn.narrow(-1, j0, j1 - j0) : randn(shape, (kPastSpan << 1) + static_cast<uint64_t>(n));
    }
    return s;
  };
  std::vector<torch::Tensor> videos;
  std::map<std::string, std::vector<torch::Tensor>> sides;
  auto t_commit = t_chunk;
  sample_stream(
      rollout, chunks, noise, clean_first_frame ? x0.slice(2, 0, 1) : torch::Tensor(),
      [&](int64_t n, const SampleState& chunk) {
        StreamChunk c;
        c.index = n;
        c.video = chunk.video[0].to(torch::kCPU, torch::kFloat32);  // the copy waits for the chunk
        for (const auto& [name, s] : chunk.side) c.side[name] = s[0].to(torch::kCPU, torch::kFloat32);
        c.seconds = since(t_chunk);
        r.chunk_seconds.push_back(c.seconds);
        r.commit_seconds.push_back(0);
        videos.push_back(c.video);
        for (const auto& [name, s] : c.side) sides[name].push_back(s);
        if (on_chunk) on_chunk(c);
        t_commit = std::chrono::steady_clock::now();
      },
      /*commit_last=*/false,
      [&](int64_t) {
        sync(device);
        r.commit_seconds.back() = since(t_commit);
        t_chunk = std::chrono::steady_clock::now();  // the next chunk's time starts after the commits
      });
  r.cache_bytes = rollout.cache_bytes();
  r.ground_truth = x0[0].cpu();
  r.sample = torch::cat(videos, 1);
  for (auto& [name, parts] : sides) {
    r.side_sample[name] = torch::cat(parts, -1);
    r.side_ground_truth[name] = side_x0.at(name)[0].cpu();
  }
  return r;
}

}  // namespace vdt
