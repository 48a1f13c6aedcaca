// run_sample: the three modes of `vdt sample` over the generation layer; files and previews as docs/cli.md describes.
#include "tools/sample_run.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/device_flag.h"
#include "core/error.h"
#include "core/png.h"
#include "core/safetensors.h"
#include "data/synth_vae.h"
#include "diffusion/flow_match.h"
#include "generate/clip_sampling.h"
#include "generate/generation_model.h"
#include "generate/model_inputs.h"
#include "generate/preview.h"
#include "generate/window.h"
#include "train/checkpoint/export.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

bool has_vae(const std::string& root) { return fs::exists(fs::path(root) / "vae.safetensors"); }

// Writes chunk c of a stream to <base>.chunks/chunk_NNNNN.safetensors (atomically: a reader sees whole files only).
void write_chunk(const std::string& base, const std::string& lora, int64_t chunk_frames, const StreamChunk& c) {
  char name[32];
  std::snprintf(name, sizeof(name), "chunk_%05lld.safetensors", static_cast<long long>(c.index));
  NamedTensors t = {{"sample", c.video}};
  for (const auto& [k, v] : c.side) t.emplace_back(k + ".sample", v);
  save_safetensors(base + ".chunks/" + name, t,
                   {{"lora", lora},
                    {"chunk", std::to_string(c.index)},
                    {"first_latent_frame", std::to_string(c.index * chunk_frames)}});
  std::printf("  chunk %lld: latent frames %lld..%lld in %.3f s -> %s.chunks/%s\n", static_cast<long long>(c.index),
              static_cast<long long>(c.index * chunk_frames), static_cast<long long>((c.index + 1) * chunk_frames - 1),
              c.seconds, base.c_str(), name);
  std::fflush(stdout);
}

// A window's result: <base>.safetensors (`sample`, the window's `ground_truth`, H3's `audio.*`) and, on a root with a
// preview VAE, <base>.png (rows: ground truth, sample; the shorter row padded white).
void write_window(const SampleConfig& cfg, const std::string& base, const StreamResult& r, int64_t chunk_frames,
                  const std::string* prompt) {
  NamedTensors tensors = {{"ground_truth", r.ground_truth}, {"sample", r.sample}};
  for (const auto& [name, t] : r.side_sample) {  // H3: the audio stream sampled beside the video
    tensors.emplace_back(name + ".ground_truth", r.side_ground_truth.at(name));
    tensors.emplace_back(name + ".sample", t);
  }
  std::map<std::string, std::string> meta = {
      {"lora", cfg.lora}, {"clip_id", r.clip_id}, {"start", std::to_string(r.start)}};
  if (cfg.stream) {
    meta["chunks"] = std::to_string(r.chunk_seconds.size());
    meta["window"] = std::to_string(r.window), meta["sink_chunks"] = std::to_string(r.sink_chunks);
  }
  if (prompt) meta["prompt"] = *prompt;
  save_safetensors(base + ".safetensors", tensors, meta);
  if (cfg.stream)
    std::printf(
        "stream %s from frame %lld: %zu chunks of %lld latent frames (window %lld, sink %lld), KV cache "
        "%.1f MiB -> %s.safetensors\n",
        r.clip_id.c_str(), static_cast<long long>(r.start), r.chunk_seconds.size(),
        static_cast<long long>(chunk_frames), static_cast<long long>(r.window), static_cast<long long>(r.sink_chunks),
        static_cast<double>(r.cache_bytes) / (1 << 20), base.c_str());
  else
    std::printf("sample %s frames %lld..%lld (chunks of %lld): mse vs ground truth %.4f -> %s.safetensors\n",
                r.clip_id.c_str(), static_cast<long long>(r.start),
                static_cast<long long>(r.start + r.sample.size(1) - 1), static_cast<long long>(chunk_frames),
                (r.sample - r.ground_truth).pow(2).mean().item<double>(), base.c_str());
  if (!has_vae(cfg.data_root)) return;
  const auto vae = SynthVae::open(cfg.data_root);
  auto gt = vae.decode(r.ground_truth), st = vae.decode(r.sample);  // [F, 3, h, w]
  auto pad = [](torch::Tensor v, int64_t frames) {                  // white frames after a shorter row
    if (v.size(0) >= frames) return v;
    auto shape = v.sizes().vec();
    shape[0] = frames - v.size(0);
    return torch::cat({v, torch::ones(shape, v.options())});
  };
  const int64_t frames = std::max(gt.size(0), st.size(0));
  write_png(base + ".png", frame_grid({pad(gt, frames), pad(st, frames)}, 2, 4));
  std::printf("  preview %s.png (rows: ground truth, %s)\n", base.c_str(), cfg.stream ? "stream" : "sample");
}

// `vdt sample --causal [--stream]`: the base rebuilt from the LoRA's metadata (or --weights), the LoRA loaded, the
// run's val windows (its --val-clips and seed) generated, once per new prompt when there are any.
int sample_causal(const SampleConfig& cfg, const torch::Device& device, const std::vector<std::string>& prompts,
                  const std::string& text_table) {
  // with --stream-blocks the base is built on the host (it may be larger than the card); the stream moves the rest
  const auto build_on = cfg.stream ? stream_speed_build_device(cfg.speed, device) : device;
  auto g =
      load_generation_model(cfg.lora, cfg.weights, build_on, device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  auto& model = *g.model;
  const auto& meta = g.meta;
  const int64_t cf = meta.chunk_frames;
  CausalDataConfig dc;
  dc.root = cfg.data_root, dc.span_frames = meta.span_chunks * cf, dc.seed = meta.seed, dc.val_clips = meta.val_clips;
  if (!meta.picture1.empty()) dc.picture1 = meta.picture1;
  fs::create_directories(cfg.out);
  if (!prompts.empty()) dc.text_table = text_table;  // a Wan base (SampleConfig::validate)
  CausalDataset ds(dc);
  fit_side_streams(model, ds, dc.span_frames, cf);
  const bool student = meta.student_steps > 0;
  EulerConfig ec;
  ec.steps = cfg.steps > 0 ? cfg.steps : (student ? meta.student_steps : 30);
  ec.cfg_scale = cfg.cfg >= 0 ? cfg.cfg : (student ? meta.student_cfg : 5.0);
  ec.shift = cfg.shift > 0 ? cfg.shift : flow_schedule(model.family()).sample_shift;
  const bool graphs = cfg.stream && apply_stream_speed(model, cfg.speed, device);
  // Without new prompts one pass per window with its own text; with them one per prompt (<clip>_f<start>_p<k>).
  const size_t passes = prompts.empty() ? 1 : prompts.size();
  const size_t windows = std::min<size_t>(ds.val().size(), static_cast<size_t>(cfg.n));
  for (size_t p = 0; p < windows * passes; ++p) {
    const size_t i = p / passes, k = p % passes;
    const std::string* prompt = prompts.empty() ? nullptr : &prompts[k];
    auto w = window_request(model, ds, i, cf, cfg.seed, meta.clean_first_frame, prompt);
    auto& q = w.request;
    q.euler = ec, q.span_chunks = meta.span_chunks;
    if (student && cfg.steps == 0) q.timesteps = meta.student_timesteps, q.renoise = meta.student_sampler == "renoise";
    if (cfg.stream) {
      if (cfg.chunks > 0) q.chunks = cfg.chunks;
      q.window = cfg.window, q.sink_chunks = cfg.sink_chunks, q.graphs = graphs;
    } else {
      q.cache = false;
    }
    const auto base =
        (fs::path(cfg.out) / (w.clip_id + "_f" + std::to_string(w.start) + (prompt ? "_p" + std::to_string(k) : "")))
            .string();
    if (prompt) std::printf("prompt %zu: \"%s\"\n", k, prompt->c_str());
    if (cfg.stream) fs::create_directories(base + ".chunks");
    const auto r = generate_window(model, std::move(w), [&](const StreamChunk& c) {
      if (cfg.stream) write_chunk(base, cfg.lora, cf, c);
    });
    write_window(cfg, base, r, cf, prompt);
  }
  return 0;
}

// `vdt sample --ckpt`: an SFT export's val clips, with and without conditions.
int sample_sft(const SampleConfig& cfg, const torch::Device& device, const std::vector<std::string>& prompts,
               const std::string& text_table) {
  auto model = load_checkpoint_model({cfg.ckpt}, device, device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  const auto meta = SafetensorsFile::open(cfg.ckpt)->metadata();
  SftDataConfig dc;
  dc.root = cfg.data_root, dc.split = cfg.split, dc.limit = cfg.n;
  dc.vocab = meta.count("vocab") ? meta.at("vocab") : "parts";
  dc.res = !cfg.res.empty() ? cfg.res : meta.count("res") ? meta.at("res") : dc.res;
  fs::create_directories(cfg.out);
  if (!prompts.empty()) dc.text_table = text_table;
  SftDataset ds(dc);
  EulerConfig ec;
  ec.steps = cfg.steps > 0 ? cfg.steps : 30, ec.cfg_scale = cfg.cfg >= 0 ? cfg.cfg : 5.0;
  ec.shift = cfg.shift > 0 ? cfg.shift : flow_schedule(model->family()).sample_shift;
  // Without new prompts one pass with the clips' own text; with them one pass per prompt (files <clip>_p<k>).
  const size_t passes = prompts.empty() ? 1 : prompts.size();
  for (size_t i = 0; i < ds.size(); ++i) {
    for (size_t k = 0; k < passes; ++k) {
      const std::string* prompt = prompts.empty() ? nullptr : &prompts[k];
      const auto r = sample_clip(*model, ds, i, ec, cfg.seed, prompt);
      const auto base = (fs::path(cfg.out) / (r.clip_id + (prompt ? "_p" + std::to_string(k) : ""))).string();
      std::map<std::string, std::string> file_meta = {{"ckpt", cfg.ckpt}, {"clip_id", r.clip_id}};
      if (prompt) file_meta["prompt"] = *prompt;
      save_safetensors(
          base + ".safetensors",
          {{"ground_truth", r.ground_truth}, {"conditioned", r.conditioned}, {"unconditioned", r.unconditioned}},
          file_meta);
      if (prompt) std::printf("prompt %zu: \"%s\"\n", k, prompt->c_str());
      const double e_c = (r.conditioned - r.ground_truth).slice(1, 1).pow(2).mean().item<double>();
      const double e_u = (r.unconditioned - r.ground_truth).slice(1, 1).pow(2).mean().item<double>();
      std::printf("sample %s: mse vs ground truth (frames 1..) with conditions %.4f, without %.4f -> %s.safetensors\n",
                  r.clip_id.c_str(), e_c, e_u, base.c_str());
      if (has_vae(cfg.data_root)) {
        const auto vae = SynthVae::open(cfg.data_root);
        write_png(
            base + ".png",
            frame_grid({vae.decode(r.ground_truth), vae.decode(r.conditioned), vae.decode(r.unconditioned)}, 2, 4));
        std::printf("  preview %s.png (rows: ground truth, with conditions, without)\n", base.c_str());
      }
    }
  }
  return 0;
}

}  // namespace

int run_sample(const SampleConfig& cfg, const std::string& text_table) {
  cfg.validate();
  const torch::Device device = resolve_device(cfg.device);
  const auto prompts = cfg.new_prompts();
  return cfg.causal ? sample_causal(cfg, device, prompts, text_table) : sample_sft(cfg, device, prompts, text_table);
}

}  // namespace vdt
