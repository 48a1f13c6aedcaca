// The streaming benchmark: the model and its conditions are built here (no data root), the stream is the generation
// layer's own (generate/request.h: the rollout over the KV-cache streams), timed per chunk after each phase.
#include "tools/sample_bench.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "core/device_flag.h"
#include "core/error.h"
#include "core/rng.h"
#include "diffusion/flow_match.h"
#include "generate/request.h"
#include "model/denoiser_registry.h"
#include "model/lora.h"
#include "train/loop/run_context.h"
#include "train/loop/trace.h"

namespace vdt {

void SampleBenchConfig::validate() const {
  denoiser_family(model);
  VDT_CHECK(height >= 2 && width >= 2 && height % 2 == 0 && width % 2 == 0, "--height ", height, " --width ", width,
            ": the latent grid must be even and at least 2 x 2");
  VDT_CHECK(chunk_frames >= 0, "--chunk-frames ", chunk_frames, ": expected 0 (the base's) or more");
  VDT_CHECK(chunks >= 1, "--chunks ", chunks, ": a stream makes at least one chunk (--chunks 1 or more)");
  VDT_CHECK(steps >= 1, "--steps ", steps, ": expected at least one Euler step");
  VDT_CHECK(warmup_chunks >= -1 && warmup_chunks < chunks, "--warmup-chunks ", warmup_chunks,
            ": expected -1 (until "
            "the window is full) or 0 to ",
            chunks - 1, " (at least one chunk is timed)");
  VDT_CHECK(lora_rank >= 1, "--lora-rank ", lora_rank, ": expected >= 1");
  VDT_CHECK(precision == "bf16" || precision == "fp32", "--precision ", precision, ": expected bf16 or fp32");
  VDT_CHECK(picture1 == "on" || picture1 == "off", "--picture1 ", picture1, ": expected on or off");
  VDT_CHECK(audio == "on" || audio == "off", "--audio ", audio, ": expected on or off");
  VDT_CHECK(shift >= 0, "--shift ", shift, ": expected 0 (the base's) or a positive sigma shift");
}

const std::vector<ConfigField<SampleBenchConfig>>& SampleBenchConfig::fields() {
  using C = SampleBenchConfig;
  static const std::vector<ConfigField<C>> f = [] {
    std::vector<ConfigField<C>> f = {
        model_field(&C::model, denoiser_presets()),
        {"--height", "latent height (30: 480 pixels)", &C::height},
        {"--width", "latent width (52: 832 pixels)", &C::width},
        {"--chunk-frames", "latent frames per chunk (0: the base's, Wan 3, H3 5)", &C::chunk_frames},
        {"--chunks", "chunks to generate", &C::chunks},
        {"--window", "finished chunks kept after the sink (-1: all)", &C::window},
        {"--sink-chunks", "first chunks kept as the sink (-1: the base's)", &C::sink_chunks},
        {"--span-chunks", "chunks of the trained span", &C::span_chunks},
        {"--steps", "Euler steps per chunk", &C::steps},
        {"--cfg", "guidance scale (1: no guidance, one branch)", &C::cfg},
        {"--text-len", "text tokens (0: Wan 512, H3 256)", &C::text_len},
        {"--picture1", "H3: on | off (Picture 1 on the video's latent grid)", &C::picture1},
        {"--audio", "H3: on | off (the audio stream beside the video)", &C::audio},
        {"--lora-rank", "rank of the random LoRA", &C::lora_rank},
        {"--warmup-chunks", "chunks left out of frames per second (-1: until the window is full: sink + window + 1)",
         &C::warmup_chunks},
        {"--layers", "blocks (0: the preset's; fewer: tests)", &C::layers},
        device_field(&C::device),
        precision_field(&C::precision, {{Precision::bf16, ""}, {Precision::fp32, ""}}),
        {"--shift", "sigma shift of the Euler grid (0: the base's)", &C::shift},
    };
    for (auto&& field : lift(&C::speed, StreamSpeed::fields())) f.push_back(field);
    return f;
  }();
  return f;
}

namespace {

void sample_bench_sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}
double sample_bench_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

SampleBenchResult run_sample_bench(const SampleBenchConfig& cfg) {
  cfg.validate();
  torch::NoGradGuard ng;
  const auto device = resolve_device(cfg.device);
  const auto dtype = cfg.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  SampleBenchResult r;
  r.family = denoiser_family(cfg.model);
  auto model = make_denoiser(cfg.model, torch::TensorOptions().device(device).dtype(dtype), cfg.layers);
  const auto sides = model->side_streams();
  const bool h3 = r.family == "h3";  // the benchmark's geometry: H3 chunks of one VAE clip, its text, Picture 1
  model->init_random_base(cfg.seed);
  LoraConfig lc;
  lc.rank = cfg.lora_rank, lc.alpha = static_cast<double>(cfg.lora_rank), lc.targets = model->lora_targets();
  attach_lora(*model, lc, cfg.seed);
  {  // B != 0, so the LoRA's GEMMs run as a trained one's would (their time does not depend on the values)
    auto gen = at::globalContext().defaultGenerator(device).clone();
    gen.set_current_seed(cfg.seed + 1);
    for (auto& p : model->named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 1e-3, gen);
  }
  model->eval();
  const bool graphs = apply_stream_speed(*model, cfg.speed);
  r.graphs = graphs;

  const int64_t cf = cfg.chunk_frames > 0 ? cfg.chunk_frames : (h3 ? 5 : 3);
  const int64_t Lt = cfg.text_len > 0 ? cfg.text_len : (h3 ? 256 : 512);
  const int64_t C = model->latent_channels(), H = cfg.height, W = cfg.width;
  auto gen = make_generator(torch::kCPU, cfg.seed + 2);
  auto randn = [&](at::IntArrayRef shape) { return torch::randn(shape, gen, torch::kFloat32).to(device); };
  const bool guided = cfg.cfg != 1.0;
  const auto context = randn({guided ? 2 : 1, Lt, model->text_dim()}).to(dtype);  // row 0 the prompt, 1 the null

  // The request: its own conditions (row 0 the prompt, row 1 the null text), the benchmark's noise.
  GenerationRequest q;
  q.conditions.text = context;
  q.conditions.null_row = guided ? 1 : -1;
  if (h3 && cfg.picture1 == "on") {
    q.conditions.cond["picture1"] = randn({C, 1, H, W}).to(dtype);
    q.conditions.cond_noise["picture1"] = randn({1, C, 1, H, W}).to(dtype);
  }
  const bool audio = !sides.empty() && cfg.audio == "on";
  q.side_streams = audio;
  q.height = H, q.width = W, q.chunk_frames = cf, q.chunks = cfg.chunks, q.window = cfg.window;
  q.sink_chunks = cfg.sink_chunks, q.span_chunks = cfg.span_chunks, q.seed = cfg.seed, q.graphs = graphs;
  q.euler.steps = cfg.steps, q.euler.cfg_scale = cfg.cfg;
  q.euler.shift = cfg.shift > 0 ? cfg.shift : flow_schedule(r.family).sample_shift;
  StepTrace trace;  // VDT_TRACE / VDT_TRACE_STEP=n: chunk n's steps and commit (1-based)
  StreamHooks hooks;
  hooks.noise = [&](int64_t n) {
    SampleState s{randn({1, C, cf, H, W}), {}};
    if (audio)
      for (const auto& name : sides) {
        const auto b = model->side_stream_chunks(name, (n + 1) * cf, cf);  // chunk n's steps [b[n], b[n + 1])
        auto shape = model->side_stream_step_shape(name);
        shape.insert(shape.begin(), 1);
        shape.push_back(b[static_cast<size_t>(n + 1)] - b[static_cast<size_t>(n)]);
        s.side[name] = randn(shape);  // [1, ..., steps of the chunk]
      }
    return s;
  };
  // The peak from here on: the streams and their passes, not the model's build. Opening the streams (the prefix) is
  // timed until chunk 0 starts.
  sample_bench_sync(device);
  reset_peak_memory(device);
  const auto t0 = std::chrono::steady_clock::now();
  hooks.before_chunk = [&](int64_t n) {
    if (n == 0) r.prefix_s = sample_bench_since(t0);
    trace.after_step(n);  // chunk n - 1 (1-based n) with its commits; writing its trace is not chunk n's time
    trace.before_step(n + 1);
  };
  hooks.on_chunk = [&](const StreamChunk& c) {
    r.chunk_frames_px.push_back(model->first_pixel_frame((c.index + 1) * cf) - model->first_pixel_frame(c.index * cf));
    if (cfg.on_chunk) cfg.on_chunk(c.index, c.video);
  };
  const auto res = generate_stream(*model, q, hooks);
  r.chunk_s = res.chunk_seconds, r.commit_s = res.commit_seconds;
  r.sink_chunks = res.sink_chunks, r.window = res.window;
  trace.after_step(cfg.chunks);
  // Warm-up: until the window is full the cache grows by a chunk each time (and each size records its own graph);
  // from then on every chunk sees the same cache, as a long stream does. At least one chunk stays timed. A traced
  // chunk is left out of the timing.
  const int64_t full = r.window < cfg.chunks ? r.sink_chunks + r.window + 1 : 1;
  r.warmup_chunks = std::min(cfg.warmup_chunks >= 0 ? cfg.warmup_chunks : full, cfg.chunks - 1);
  // A chunk's latency: its Euler steps and its commit.
  std::vector<double> timed;
  double seconds = 0, stream_seconds = 0;
  int64_t frames = 0, stream_frames = 0;
  for (size_t n = 0; n < r.chunk_s.size(); ++n) {
    // The last chunk runs no commit; a stream that goes on would: it counts the one before's.
    const double commit = n + 1 < r.chunk_s.size() ? r.commit_s[n] : (n > 0 ? r.commit_s[n - 1] : 0.0);
    stream_seconds += r.chunk_s[n] + commit;
    stream_frames += r.chunk_frames_px[n];
    if (static_cast<int64_t>(n) < r.warmup_chunks || trace.traces(static_cast<int64_t>(n) + 1)) continue;
    timed.push_back(r.chunk_s[n] + commit);
    seconds += timed.back();
    frames += r.chunk_frames_px[n];
  }
  std::sort(timed.begin(), timed.end());
  r.median_chunk_s = timed[timed.size() / 2];
  r.frames_per_s = seconds > 0 ? static_cast<double>(frames) / seconds : 0;
  r.stream_frames_per_s = stream_seconds > 0 ? static_cast<double>(stream_frames) / stream_seconds : 0;
  r.cache_gib = static_cast<double>(res.cache_bytes) / (1ull << 30);
  r.peak_gib = peak_memory_gb(device);
  r.graph_replays = res.graph_replays;
  const auto bounds = audio ? model->side_stream_chunks("audio", 2 * cf, cf) : std::vector<int64_t>{0, 0, 0};
  r.rows_per_chunk = cf * (H / 2) * (W / 2) + 2 * (bounds[2] - bounds[1]);
  r.prefix_rows = h3 ? Lt + (q.conditions.cond.count("picture1") ? (H / 2) * (W / 2) : 0) : 0;
  return r;
}

}  // namespace vdt
