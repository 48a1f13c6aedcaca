// `vdt sample`: Euler + CFG samples of validation clips from an SFT export; writes latents and, when the data root
// has the synthetic VAE (vae.safetensors), a PNG per clip: ground truth / with conditions / without conditions.
// `vdt sample --causal --lora L`: a causal LoRA's validation windows chunk by chunk (ground truth / sample); with
// `--stream`, generated with a KV cache (train/eval/stream_sampling.h), `--chunks N` past the span with `--window K`,
// each chunk written as it is done.
// `--prompt "..."` / `--prompts FILE` with `--text-encoder DIR` (SFT exports and Wan causal LoRAs): new prompts are
// embedded by the Python package (`python -m vdt_py embed`: umT5, into a copy of the root's text table under --out)
// and each val clip (window) is sampled once per prompt, the prompt in every cell, ids and frame 0 from the clip.
#include <algorithm>
#include <cstdio>
#include <map>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "core/device_flag.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/png.h"
#include "train/eval/preview.h"
#include "data/synth_vae.h"
#include "diffusion/flow_match.h"
#include "model/denoiser_registry.h"
#include "model/lora.h"
#include "train/causal/causal_trainer.h"
#include "train/checkpoint/export.h"
#include "train/eval/sampling.h"
#include "train/eval/stream_sampling.h"
#include "train/loop/model_inputs.h"

namespace vdt::cli {

namespace {

struct Opts {
  std::string ckpt, data_root, out, split = "val", device = "cpu", res, lora, weights;
  int64_t n = 2, steps = 30;
  double cfg = 5.0, shift = 0;  // shift 0: the base's (flow_schedule)
  uint64_t seed = 0;
  bool causal = false;
  bool stream = false;                                // --stream
  int64_t chunks = 0, window = -1, sink_chunks = -1;  // --chunks, --window, --sink-chunks (with --stream)
  std::vector<std::string> prompt;                    // --prompt, repeatable
  std::string prompts, text_encoder;                  // --prompts FILE, --text-encoder DIR
  StreamSpeed speed;                                  // --fp8, --cuda-graphs (with --stream)
};

// --prompt values then the lines of --prompts (blank lines skipped), each once, in order.
std::vector<std::string> new_prompts(const Opts& o) {
  std::vector<std::string> out;
  auto add = [&](const std::string& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (const auto& p : o.prompt) add(p);
  if (!o.prompts.empty()) {
    std::ifstream f(o.prompts);
    VDT_CHECK(f.good(), "--prompts ", o.prompts, ": cannot open (expected a text file, one prompt per line)");
    for (std::string line; std::getline(f, line);) {
      const auto a = line.find_first_not_of(" \t\r"), b = line.find_last_not_of(" \t\r");
      if (a != std::string::npos) add(line.substr(a, b - a + 1));
    }
    VDT_CHECK(!out.empty(), "--prompts ", o.prompts, ": no prompt in the file (one per line)");
  }
  return out;
}

// Embeds `prompts` with the Python package into <out>/text_table_prompts.safetensors (the root's table plus them).
std::string embed_prompts(const Opts& o, const std::string& table, const std::vector<std::string>& prompts) {
  VDT_CHECK(!o.text_encoder.empty(),
            "--prompt / --prompts need --text-encoder DIR: the umT5 encoder the data root was "
            "prepared with (e.g. Wan2.2-TI2V-5B-Diffusers/text_encoder), to embed the new prompts");
  const std::string out = (std::filesystem::path(o.out) / "text_table_prompts.safetensors").string();
  std::vector<std::string> args = {"--table",        table,          "--out",    out,
                                   "--text-encoder", o.text_encoder, "--device", o.device};
  for (const auto& p : prompts) args.insert(args.end(), {"--prompt", p});
  const int rc = run_python_tool("embed", args);
  VDT_CHECK(rc == 0, "vdt sample: embedding the prompts with --text-encoder ", o.text_encoder, " failed (exit ", rc,
            "); its messages are above");
  return out;
}

// `vdt sample --causal --stream`: each val window streamed with a KV cache; every chunk is written to
// <clip>_f<start>.chunks/chunk_NNNNN.safetensors as soon as it is done (atomically: a reader sees whole files only),
// then the stream to <clip>_f<start>.safetensors (`sample`, the window's `ground_truth`, H3's `audio.*`) and, on a
// synthetic root, a PNG (rows: ground truth, stream).
int stream_causal(const Opts& o, Denoiser& model, const CausalDataset& ds, int64_t chunk_frames, const EulerConfig& ec,
                  bool clean_first, const std::map<std::string, std::string>& meta, bool has_vae,
                  const std::vector<std::string>& prompts) {
  StreamOptions so;
  so.chunks = o.chunks, so.window = o.window, so.sink_chunks = o.sink_chunks;
  so.span_chunks = metadata_int(meta, "span_chunks", o.lora, 6);
  so.graphs = apply_stream_speed(model, o.speed);
  // Without new prompts one stream per window with its own text; with them one per prompt (<clip>_f<start>_p<k>).
  const size_t passes = prompts.empty() ? 1 : prompts.size();
  const size_t windows = std::min<size_t>(ds.val().size(), static_cast<size_t>(o.n));
  for (size_t p = 0; p < windows * passes; ++p) {
    const size_t i = p / passes, k = p % passes;
    const std::string* prompt = prompts.empty() ? nullptr : &prompts[k];
    const auto w = ds.val().at(i);
    const auto first = ds.load(w, ds.val_start(static_cast<int64_t>(i)));
    const auto base = (std::filesystem::path(o.out) /
                       (first.clip_id + "_f" + std::to_string(first.start) + (prompt ? "_p" + std::to_string(k) : "")))
                          .string();
    if (prompt) std::printf("prompt %zu: \"%s\"\n", k, prompt->c_str());
    std::filesystem::create_directories(base + ".chunks");
    const auto r = stream_causal_window(
        model, ds, i, chunk_frames, ec, o.seed, clean_first, so,
        [&](const StreamChunk& c) {
          char name[32];
          std::snprintf(name, sizeof(name), "chunk_%05lld.safetensors", static_cast<long long>(c.index));
          NamedTensors t = {{"sample", c.video}};
          for (const auto& [k, v] : c.side) t.emplace_back(k + ".sample", v);
          save_safetensors(base + ".chunks/" + name, t,
                           {{"lora", o.lora},
                            {"chunk", std::to_string(c.index)},
                            {"first_latent_frame", std::to_string(c.index * chunk_frames)}});
          std::printf("  chunk %lld: latent frames %lld..%lld in %.3f s -> %s.chunks/%s\n",
                      static_cast<long long>(c.index), static_cast<long long>(c.index * chunk_frames),
                      static_cast<long long>((c.index + 1) * chunk_frames - 1), c.seconds, base.c_str(), name);
          std::fflush(stdout);
        },
        prompt);
    NamedTensors tensors = {{"ground_truth", r.ground_truth}, {"sample", r.sample}};
    for (const auto& [name, t] : r.side_sample) {
      tensors.emplace_back(name + ".ground_truth", r.side_ground_truth.at(name));
      tensors.emplace_back(name + ".sample", t);
    }
    std::map<std::string, std::string> file_meta = {{"lora", o.lora},
                                                    {"clip_id", r.clip_id},
                                                    {"start", std::to_string(r.start)},
                                                    {"chunks", std::to_string(r.chunk_seconds.size())},
                                                    {"window", std::to_string(r.window)},
                                                    {"sink_chunks", std::to_string(r.sink_chunks)}};
    if (prompt) file_meta["prompt"] = *prompt;
    save_safetensors(base + ".safetensors", tensors, file_meta);
    std::printf(
        "stream %s from frame %lld: %zu chunks of %lld latent frames (window %lld, sink %lld), KV cache "
        "%.1f MiB -> %s.safetensors\n",
        r.clip_id.c_str(), static_cast<long long>(r.start), r.chunk_seconds.size(),
        static_cast<long long>(chunk_frames), static_cast<long long>(r.window), static_cast<long long>(r.sink_chunks),
        static_cast<double>(r.cache_bytes) / (1 << 20), base.c_str());
    if (has_vae) {
      const auto vae = SynthVae::open(o.data_root);
      auto gt = vae.decode(r.ground_truth), st = vae.decode(r.sample);  // [F, 3, h, w]
      auto pad = [](torch::Tensor v, int64_t frames) {                  // white frames after a shorter row
        if (v.size(0) >= frames) return v;
        auto shape = v.sizes().vec();
        shape[0] = frames - v.size(0);
        return torch::cat({v, torch::ones(shape, v.options())});
      };
      const int64_t frames = std::max(gt.size(0), st.size(0));
      write_png(base + ".png", frame_grid({pad(gt, frames), pad(st, frames)}, 2, 4));
      std::printf("  preview %s.png (rows: ground truth, stream)\n", base.c_str());
    }
  }
  return 0;
}

// `vdt sample --causal`: the base rebuilt from the LoRA's metadata (or --weights), the LoRA attached and loaded, the
// run's val windows (same --val-clips and seed) sampled chunk by chunk.
int sample_causal(const Opts& o, const torch::Device& device, const std::vector<std::string>& prompts) {
  if (o.lora.empty()) throw CLI::RequiredError("--lora (with --causal)");
  const auto meta = SafetensorsFile::open(o.lora)->metadata();
  auto get = [&](const char* k, const std::string& dflt) { return meta.count(k) ? meta.at(k) : dflt; };
  const auto file_lora = read_lora(o.lora);
  const int64_t chunk_frames = metadata_int(meta, "chunk_frames", o.lora, 3);
  uint64_t run_seed = 0;
  try {
    size_t used = 0;
    run_seed = std::stoull(get("seed", "0"), &used);
    if (used != get("seed", "0").size()) throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    VDT_FAIL(o.lora, ": metadata 'seed' is \"", get("seed", ""), "\", expected a whole number >= 0");
  }
  const std::string weights = !o.weights.empty() ? o.weights : get("weights", "");
  auto model = build_causal_base(get("model", get("base", "wan2.2-ti2v-5b")), weights, run_seed, device,
                                 device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  const auto lora = lora_for_model(*model, file_lora, o.lora);
  LoraConfig lc;
  lc.rank = lora.rank, lc.alpha = lora.alpha, lc.targets = model->lora_targets();
  attach_lora(*model, lc, 0);
  load_lora(*model, lora, o.lora);
  CausalDataConfig dc;
  dc.root = o.data_root, dc.span_frames = 6 * chunk_frames, dc.seed = run_seed;
  dc.val_clips = metadata_int(meta, "val_clips", o.lora, 12);
  dc.picture1 = get("picture1", dc.picture1);
  std::filesystem::create_directories(o.out);
  if (!prompts.empty()) {
    VDT_CHECK(model->family() == "wan", "--prompt / --prompts: new prompts are embedded with umT5 for Wan bases; this ",
              "LoRA's base is ", model->family(), " (its text rows are Qwen3-VL states tagged around Picture 1). ",
              "Sample its val windows without --prompt, or prepare a root with the new captions (vdt data prepare ",
              "--model h3)");
    dc.text_table = embed_prompts(o, (std::filesystem::path(o.data_root) / "text_table.safetensors").string(), prompts);
  }
  CausalDataset ds(dc);
  fit_side_streams(*model, ds, dc.span_frames, chunk_frames);
  const bool has_vae = std::filesystem::exists(std::filesystem::path(o.data_root) / "vae.safetensors");
  EulerConfig ec;
  ec.steps = o.steps, ec.cfg_scale = o.cfg;
  ec.shift = o.shift > 0 ? o.shift : flow_schedule(model->family()).sample_shift;
  const bool clean_first = get("clean_first_frame", "0") == "1";
  if (o.stream) return stream_causal(o, *model, ds, chunk_frames, ec, clean_first, meta, has_vae, prompts);
  // Without new prompts one pass with the windows' own text; with them one pass per prompt (files
  // <clip>_f<start>_p<k>).
  const size_t passes = prompts.empty() ? 1 : prompts.size();
  for (size_t i = 0; i < std::min<size_t>(ds.val().size(), static_cast<size_t>(o.n)); ++i) {
    for (size_t k = 0; k < passes; ++k) {
      const std::string* prompt = prompts.empty() ? nullptr : &prompts[k];
      const auto r = sample_causal_window(*model, ds, i, chunk_frames, ec, o.seed, clean_first, prompt);
      const auto base = (std::filesystem::path(o.out) /
                         (r.clip_id + "_f" + std::to_string(r.start) + (prompt ? "_p" + std::to_string(k) : "")))
                            .string();
      if (prompt) std::printf("prompt %zu: \"%s\"\n", k, prompt->c_str());
      NamedTensors tensors = {{"ground_truth", r.ground_truth}, {"sample", r.sample}};
      for (const auto& [name, t] : r.side_sample) {  // H3: the audio stream sampled beside the video
        tensors.emplace_back(name + ".ground_truth", r.side_ground_truth.at(name));
        tensors.emplace_back(name + ".sample", t);
      }
      std::map<std::string, std::string> file_meta = {
          {"lora", o.lora}, {"clip_id", r.clip_id}, {"start", std::to_string(r.start)}};
      if (prompt) file_meta["prompt"] = *prompt;
      save_safetensors(base + ".safetensors", tensors, file_meta);
      std::printf("sample %s frames %lld..%lld (chunks of %lld): mse vs ground truth %.4f -> %s.safetensors\n",
                  r.clip_id.c_str(), static_cast<long long>(r.start),
                  static_cast<long long>(r.start + r.sample.size(1) - 1), static_cast<long long>(chunk_frames),
                  (r.sample - r.ground_truth).pow(2).mean().item<double>(), base.c_str());
      if (has_vae) {
        const auto vae = SynthVae::open(o.data_root);
        write_png(base + ".png", frame_grid({vae.decode(r.ground_truth), vae.decode(r.sample)}, 2, 4));
        std::printf("  preview %s.png (rows: ground truth, sample)\n", base.c_str());
      }
    }
  }
  return 0;
}

}  // namespace

void add_sample(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Opts>();
  auto* s = app.add_subcommand("sample",
                               "Sample clips of a data root with an SFT export (Euler, two-branch CFG), or a causal "
                               "LoRA chunk by chunk (--causal)");
  s->add_option(spellings("--ckpt"), o->ckpt, "step-N.safetensors from `vdt train sft` (without --causal)")
      ->check(CLI::ExistingFile);
  s->add_flag(spellings("--causal"), o->causal,
              "sample a causal LoRA's val windows chunk by chunk, the prefix as clean context");
  s->add_flag(spellings("--stream"), o->stream,
              "with --causal: generate with a KV cache (each finished chunk's "
              "keys and values kept, not recomputed), each chunk written as it is done");
  s->add_option(spellings("--chunks"), o->chunks,
                "with --stream: chunks to generate (0: the LoRA's span); past the "
                "span needs --window")
      ->capture_default_str();
  s->add_option(spellings("--window"), o->window,
                "with --stream: finished chunks kept in the cache after the sink "
                "(-1: all); sink + window + 1 must fit in the trained span")
      ->capture_default_str();
  s->add_option(spellings("--sink-chunks"), o->sink_chunks,
                "with --stream: first chunks kept as the attention sink "
                "(-1: the base's default: Wan 1, H3 0, its text and Picture 1 being the sink)")
      ->capture_default_str();
  bind_fields(s, std::shared_ptr<StreamSpeed>(o, &o->speed), StreamSpeed::fields());
  s->add_option(spellings("--lora"), o->lora, "with --causal: lora_stepNNNNN.safetensors from `vdt train causal`")
      ->check(CLI::ExistingFile);
  s->add_option(spellings("--weights"), o->weights,
                "with --causal: the base weights (default: the LoRA's metadata 'weights')");
  s->add_option(spellings("--data_root"), o->data_root, "data root giving ids, text and frame 0")->required();
  s->add_option(spellings("--out"), o->out, "output directory")->required();
  s->add_option(spellings("--split"), o->split, "split to sample from")->capture_default_str();
  s->add_option(spellings("--n"), o->n, "number of clips (>= 1)")->capture_default_str()->check(CLI::PositiveNumber);
  s->add_option(spellings("--steps"), o->steps, "Euler steps")->capture_default_str()->check(CLI::PositiveNumber);
  s->add_option(spellings("--cfg"), o->cfg, "guidance scale")->capture_default_str();
  s->add_option(spellings("--shift"), o->shift,
                "sigma shift of the inference grid; 0 = the base's (Wan 5, "
                "MiniMax-H3 12, its video schedule)")
      ->capture_default_str();
  s->add_option(spellings("--device"), o->device, "cpu, cuda or cuda:N")->capture_default_str();
  s->add_option(spellings("--res"), o->res, "resolution (default: the checkpoint's)");
  s->add_option(spellings("--seed"), o->seed, "noise seed")->capture_default_str();
  s->add_option(spellings("--prompt"), o->prompt,
                "a new prompt (repeatable; SFT exports and Wan causal LoRAs, with or "
                "without --stream): each val clip / window is sampled with it in every cell; needs --text-encoder");
  s->add_option(spellings("--prompts"), o->prompts, "a file of new prompts, one per line (as --prompt)")
      ->check(CLI::ExistingFile);
  s->add_option(spellings("--text-encoder"), o->text_encoder,
                "umT5 directory that embeds --prompt / --prompts (the "
                "encoder the data root was prepared with)");
  s->callback([o, &exit_code] {
    const torch::Device device = resolve_device(o->device);
    const auto prompts = new_prompts(*o);
    VDT_CHECK(o->stream || (o->chunks == 0 && o->window == -1 && o->sink_chunks == -1),
              "--chunks, --window and "
              "--sink-chunks belong to --stream (vdt sample --causal --stream ...)");
    VDT_CHECK(!o->stream || o->causal, "--stream streams a causal LoRA: give --causal --lora FILE");
    VDT_CHECK(o->stream || (o->speed.fp8 == "off" && o->speed.cuda_graphs == "auto"),
              "--fp8 and --cuda-graphs "
              "belong to --stream (vdt sample --causal --stream ...)");
    VDT_CHECK(o->chunks >= 0, "--chunks ", o->chunks, ": expected 0 (the LoRA's span) or more chunks");
    if (o->causal) {
      exit_code = sample_causal(*o, device, prompts);
      return;
    }
    if (o->ckpt.empty()) throw CLI::RequiredError("--ckpt (or --causal --lora)");
    auto model = load_checkpoint_model({o->ckpt}, device, device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
    const auto meta = SafetensorsFile::open(o->ckpt)->metadata();
    SftDataConfig dc;
    dc.root = o->data_root, dc.split = o->split, dc.limit = o->n;
    dc.vocab = meta.count("vocab") ? meta.at("vocab") : "parts";
    dc.res = !o->res.empty() ? o->res : meta.count("res") ? meta.at("res") : dc.res;
    std::filesystem::create_directories(o->out);
    if (!prompts.empty())
      dc.text_table =
          embed_prompts(*o, (std::filesystem::path(o->data_root) / "text_table.safetensors").string(), prompts);
    SftDataset ds(dc);
    const bool has_vae = std::filesystem::exists(std::filesystem::path(o->data_root) / "vae.safetensors");
    EulerConfig ec;
    ec.steps = o->steps, ec.cfg_scale = o->cfg;
    ec.shift = o->shift > 0 ? o->shift : flow_schedule(model->family()).sample_shift;
    // Without new prompts one pass with the clips' own text; with them one pass per prompt (files <clip>_p<k>).
    const size_t passes = prompts.empty() ? 1 : prompts.size();
    for (size_t i = 0; i < ds.size(); ++i) {
      for (size_t k = 0; k < passes; ++k) {
        const std::string* prompt = prompts.empty() ? nullptr : &prompts[k];
        const auto r = sample_clip(*model, ds, i, ec, o->seed, prompt);
        const auto base =
            (std::filesystem::path(o->out) / (r.clip_id + (prompt ? "_p" + std::to_string(k) : ""))).string();
        std::map<std::string, std::string> file_meta = {{"ckpt", o->ckpt}, {"clip_id", r.clip_id}};
        if (prompt) file_meta["prompt"] = *prompt;
        save_safetensors(
            base + ".safetensors",
            {{"ground_truth", r.ground_truth}, {"conditioned", r.conditioned}, {"unconditioned", r.unconditioned}},
            file_meta);
        if (prompt) std::printf("prompt %zu: \"%s\"\n", k, prompt->c_str());
        const double e_c = (r.conditioned - r.ground_truth).slice(1, 1).pow(2).mean().item<double>();
        const double e_u = (r.unconditioned - r.ground_truth).slice(1, 1).pow(2).mean().item<double>();
        std::printf(
            "sample %s: mse vs ground truth (frames 1..) with conditions %.4f, without %.4f -> %s.safetensors\n",
            r.clip_id.c_str(), e_c, e_u, base.c_str());
        if (has_vae) {
          const auto vae = SynthVae::open(o->data_root);
          write_png(
              base + ".png",
              frame_grid({vae.decode(r.ground_truth), vae.decode(r.conditioned), vae.decode(r.unconditioned)}, 2, 4));
          std::printf("  preview %s.png (rows: ground truth, with conditions, without)\n", base.c_str());
        }
      }
    }
    exit_code = 0;
  });
}

}  // namespace vdt::cli
