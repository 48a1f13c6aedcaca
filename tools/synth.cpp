// The synthetic world and the root writer. A run fixes the camera (pan direction, zoom) and a palette of 8 part
// ids; a clip places 3-5 of them (discs for odd ids, rectangles for even) with a motion per latent frame (one
// switch point). Every draw comes from RngStream keyed by (seed, purpose, run, clip), so a clip does not depend on
// how many other clips or runs are generated.
#include "tools/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fnv1a.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "core/safetensors.h"
#include "model/denoiser_registry.h"

namespace vdt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kPartSpeed = 0.08;  // view widths per latent frame (~1.3 id pixels at 16 px)
constexpr double kPanSpeed = 0.03;   // camera, view widths per latent frame
constexpr int kPaletteSize = 8;

enum Dir { kStill, kLeft, kRight, kUp, kDown, kNumDirs };
constexpr const char* kDirNames[kNumDirs] = {"still", "left", "right", "up", "down"};
// World x grows to the right and y downwards (as image columns and rows), so "up" is -y.
constexpr double kDirX[kNumDirs] = {0, -1, 1, 0, 0};
constexpr double kDirY[kNumDirs] = {0, 0, 0, -1, 1};

// Sequential uniform draws at counters (a, b) of one stream.
class Draws {
 public:
  Draws(uint64_t seed, uint32_t purpose, uint64_t a, uint32_t b) : stream_(seed, purpose), a_(a), b_(b) {}
  double uniform() { return stream_.uniform(a_, b_, i_++); }
  double range(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t pick(int64_t n) { return std::min<int64_t>(n - 1, static_cast<int64_t>(uniform() * n)); }
  // k distinct elements of `pool` in draw order (partial Fisher-Yates).
  template <typename T>
  std::vector<T> sample(std::vector<T> pool, size_t k) {
    for (size_t i = 0; i < k; ++i) std::swap(pool[i], pool[i + pick(static_cast<int64_t>(pool.size() - i))]);
    pool.resize(k);
    return pool;
  }

 private:
  RngStream stream_;
  uint64_t a_;
  uint32_t b_;
  uint32_t i_ = 0;
};

struct Run {
  std::string name;
  bool val = false;
  Dir pan = kStill;
  double zoom = 1.0;  // view size in world units
  std::vector<int> palette;
};

struct Part {
  int id = 0;
  bool disc = false;
  double x0 = 0, y0 = 0, half_w = 0, half_h = 0;  // world units; a disc uses half_w as radius
  std::vector<Dir> dirs;                          // per latent frame: the motion from frame f-1 to f (f=0: as f=1)
};

struct Clip {
  std::string id;
  const Run* run = nullptr;
  int64_t index = 0;  // within the run
  bool drop = false;
  std::vector<Part> parts;  // draw order: later parts cover earlier ones
};

Run draw_run(const SynthConfig& cfg, int64_t r, bool val) {
  Draws d(cfg.seed, rng_purpose::kSynthRun, static_cast<uint64_t>(r), 0);
  Run run;
  char name[32];
  std::snprintf(name, sizeof name, "run%03lld", static_cast<long long>(r));
  run.name = name;
  run.val = val;
  run.pan = static_cast<Dir>(d.pick(kNumDirs));
  run.zoom = d.range(0.85, 1.15);
  std::vector<int> ids;
  for (int i = 1; i < synth::kNumParts; ++i) ids.push_back(i);
  run.palette = d.sample(ids, kPaletteSize);
  return run;
}

Clip draw_clip(const SynthConfig& cfg, const Run& run, int64_t r, int64_t c) {
  Draws d(cfg.seed, rng_purpose::kSynthClip, static_cast<uint64_t>(r), static_cast<uint32_t>(c));
  Clip clip;
  char name[48];
  std::snprintf(name, sizeof name, "%s_c%02lld", run.name.c_str(), static_cast<long long>(c));
  clip.id = name;
  clip.run = &run;
  clip.index = c;
  const auto ids = d.sample(run.palette, static_cast<size_t>(3 + d.pick(3)));
  const int64_t F = cfg.latent_frames;
  for (int id : ids) {
    Part p;
    p.id = id;
    p.disc = id % 2 == 1;
    p.x0 = d.range(0.2, 0.8) * run.zoom;
    p.y0 = d.range(0.2, 0.8) * run.zoom;
    p.half_w = d.range(0.11, 0.2) * run.zoom;
    p.half_h = p.disc ? p.half_w : d.range(0.11, 0.2) * run.zoom;
    const Dir a = static_cast<Dir>(d.pick(kNumDirs)), b = static_cast<Dir>(d.pick(kNumDirs));
    const int64_t k = 1 + d.pick(std::max<int64_t>(F, 1));  // frames >= k move as b; k == F: no switch
    p.dirs.resize(F);
    for (int64_t f = 1; f < F; ++f) p.dirs[f] = f < k ? a : b;
    p.dirs[0] = F > 1 ? p.dirs[1] : a;
    clip.parts.push_back(std::move(p));
  }
  return clip;
}

// 2-D affine world (x, y) -> normalised image (u, v) of frame f: {a, b, c, d, e, f} with u = a x + b y + c.
std::array<double, 6> world_to_image(const Run& run, int64_t f) {
  const double cx = kDirX[run.pan] * kPanSpeed * run.zoom * f, cy = kDirY[run.pan] * kPanSpeed * run.zoom * f;
  return {1.0 / run.zoom, 0.0, 0.0 - cx / run.zoom, 0.0, 1.0 / run.zoom, 0.0 - cy / run.zoom};  // no -0 in JSON
}

// Part centre at frame f: the start plus the motions of frames 1..f.
std::pair<double, double> part_centre(const Part& p, const Run& run, int64_t f) {
  double x = p.x0, y = p.y0;
  for (int64_t j = 1; j <= f; ++j) {
    x += kDirX[p.dirs[j]] * kPartSpeed * run.zoom;
    y += kDirY[p.dirs[j]] * kPartSpeed * run.zoom;
  }
  return {x, y};
}

// [F, H*s, W*s] uint8: each pixel centre mapped back to the world through the frame's affine; the topmost part
// covering it wins, else the floor (0).
torch::Tensor render_ids(const SynthConfig& cfg, const Clip& clip) {
  const int64_t F = cfg.latent_frames, hs = cfg.latent_h * cfg.sem_scale, ws = cfg.latent_w * cfg.sem_scale;
  auto ids = torch::zeros({F, hs, ws}, torch::kByte);
  uint8_t* out = ids.data_ptr<uint8_t>();
  for (int64_t f = 0; f < F; ++f) {
    const auto m = world_to_image(*clip.run, f);
    const double det = m[0] * m[4] - m[1] * m[3];
    std::vector<std::pair<double, double>> centres;
    for (const auto& p : clip.parts) centres.push_back(part_centre(p, *clip.run, f));
    for (int64_t row = 0; row < hs; ++row)
      for (int64_t col = 0; col < ws; ++col) {
        const double u = (col + 0.5) / ws - m[2], v = (row + 0.5) / hs - m[5];
        const double x = (m[4] * u - m[1] * v) / det, y = (-m[3] * u + m[0] * v) / det;
        uint8_t id = 0;
        for (size_t i = clip.parts.size(); i-- > 0;) {
          const auto& p = clip.parts[i];
          const double dx = x - centres[i].first, dy = y - centres[i].second;
          const bool in =
              p.disc ? dx * dx + dy * dy <= p.half_w * p.half_w : std::abs(dx) <= p.half_w && std::abs(dy) <= p.half_h;
          if (in) {
            id = static_cast<uint8_t>(p.id);
            break;
          }
        }
        out[(f * hs + row) * ws + col] = id;
      }
  }
  return ids;
}

// Cell f: the camera's pan and each part's motion into frame f, parts in id order, e.g. "pan:left 3:up 8:still".
std::vector<std::string> clip_cells(const SynthConfig& cfg, const Clip& clip) {
  auto parts = clip.parts;
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.id < b.id; });
  std::vector<std::string> cells;
  for (int64_t f = 0; f < cfg.latent_frames; ++f) {
    std::string s = std::string("pan:") + kDirNames[clip.run->pan];
    for (const auto& p : parts) {
      s += ' ';
      s += std::to_string(p.id);
      s += ':';
      s += kDirNames[p.dirs[f]];
    }
    cells.push_back(s);
  }
  return cells;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(sep, start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The entries a synth root consists of: what --overwrite removes.
const std::vector<std::string> kRootEntries = {"dataset.json",
                                               "index",
                                               "latents",
                                               "cond",
                                               "meta",
                                               "text_table.safetensors",
                                               "vae.safetensors",
                                               "audio_silence.safetensors"};

// H3: the clip's one prompt, led by Picture 1's label and vision tokens (docs/h3_model.md §1.11).
const char* kVisionToken = "<|image_pad|>";
std::string h3_prompt(const std::string& first_cell) {
  std::string p = "<Picture 1>:";
  for (int i = 0; i < 4; ++i) p += std::string(" ") + kVisionToken;
  return p + " " + first_cell;
}

// The silent audio latent [2, Da, 8]: one fixed vector per root seed for both channels, the first two steps pulled
// towards zero (an encoder's zero padding at the start).
torch::Tensor synth_silence(int64_t channels, uint64_t seed) {
  auto c = synth::normal_draws(RngStream(seed, rng_purpose::kSynthSilence), 0, 0, {channels}) * 0.5;  // [Da]
  auto s = c.view({1, channels, 1}).expand({2, channels, 8}).clone();
  s.narrow(2, 0, 1).mul_(0.5), s.narrow(2, 1, 1).mul_(0.8);
  return s.to(torch::kBFloat16);
}

void prepare_out_dir(const SynthConfig& cfg) {
  const fs::path root(cfg.out);
  std::error_code ec;
  if (fs::exists(root, ec)) {
    VDT_CHECK(fs::is_directory(root, ec), "data synth: ", cfg.out, " exists and is not a directory");
    if (!fs::is_empty(root, ec)) {
      VDT_CHECK(cfg.overwrite, "data synth: ", cfg.out, " exists and is not empty",
                "\n---> HINT: pick another OUT, or pass --overwrite to replace its synth entries (dataset.json, "
                "index/, latents/, cond/, meta/, text_table.safetensors, vae.safetensors)");
      for (const auto& e : kRootEntries) {
        fs::remove_all(root / e, ec);
        VDT_CHECK(!ec, "data synth: cannot remove ", (root / e).string(), ": ", ec.message());
      }
    }
  }
  for (const char* sub : {"index", "latents", "cond", "meta"}) {
    fs::create_directories(root / sub, ec);
    VDT_CHECK(!ec, "data synth: cannot create ", (root / sub).string(), ": ", ec.message());
  }
}

}  // namespace

void SynthConfig::validate() const {
  VDT_CHECK(!out.empty(), "data synth: OUT (the root directory to write) is empty");
  auto in_range = [](const char* flag, int64_t v, int64_t lo, int64_t hi) {
    VDT_CHECK(v >= lo && v <= hi, "data synth: ", flag, " ", v, " is out of range; expected ", lo, "..", hi);
  };
  in_range("--channels", latent_channels, 1, 1024);
  in_range("--latent_frames", latent_frames, 1, 1024);
  in_range("--latent_h", latent_h, 1, 512);
  in_range("--latent_w", latent_w, 1, 512);
  in_range("--sem_scale", sem_scale, 1, 16);
  in_range("--text_dim", text_dim, 1, 65536);
  in_range("--text_len", text_len, 1, 4096);
  in_range("--train_runs", train_runs, 1, 500);
  in_range("--train_clips_per_run", train_clips_per_run, 1, 99);
  in_range("--val_runs", val_runs, 0, 499);
  in_range("--val_clips_per_run", val_clips_per_run, 1, 99);
  in_range("--n_drop", n_drop, 0, train_runs * train_clips_per_run - 1);
  family();
  VDT_CHECK(latent_hw.empty() || latent_hw.size() == 2, "data synth: --latent_hw takes two numbers H W, got ",
            latent_hw.size());
  in_range("--audio_channels", audio_channels, 1, 1024);
  VDT_CHECK(family() != "h3" || (latent_h % 2 == 0 && latent_w % 2 == 0),
            "data synth: --model h3 needs an even latent ", "height and width (H3 patchifies 2x2), got ", latent_h, "x",
            latent_w);
}

std::string SynthConfig::family() const {
  if (model == "wan" || model == "h3") return model;
  return denoiser_family(model);  // an unknown name is an error listing the presets
}

const std::vector<ConfigField<SynthConfig>>& SynthConfig::fields() {
  using C = SynthConfig;
  static const std::vector<ConfigField<C>> f = {
      {"out", "root directory to create", &C::out, true},
      seed_field(&C::seed),
      model_field(&C::model, denoiser_presets(),
                  "or a family, wan or h3: the root's family; an h3 root has Picture 1 and silent audio, and h3-tiny's "
                  "24 channels, text_dim 48 and a 32-latent stream unless given"),
      {"--audio_channels", "h3: audio latent width", &C::audio_channels},
      {"--latent_frames", "latent frames F (= prompt cells)", &C::latent_frames},
      {"--latent_h", "latent height H", &C::latent_h},
      {"--latent_w", "latent width W", &C::latent_w},
      {"--latent_hw", "latent H W (overrides --latent_h/--latent_w)", &C::latent_hw, false, false, 2},
      {"--channels", "latent channels C", &C::latent_channels},
      {"--sem_scale", "id map pixels per latent pixel (ids are [F, H*s, W*s])", &C::sem_scale},
      {"--text_dim", "text embedding width", &C::text_dim},
      {"--text_len", "text tokens per prompt", &C::text_len},
      {"--train_runs", "train runs", &C::train_runs},
      {"--train_clips_per_run", "clips per train run", &C::train_clips_per_run},
      {"--val_runs", "val runs (disjoint from the train runs)", &C::val_runs},
      {"--val_clips_per_run", "clips per val run", &C::val_clips_per_run},
      {"--n_drop", "train clips marked drop:true", &C::n_drop},
      {"--flat",
       "each latent frame its mean over the picture, per channel (a root any model learns fast: the FP8 gate's)",
       &C::flat},
      {"--overwrite", "replace the synth entries of a non-empty OUT", &C::overwrite},
  };
  return f;
}

namespace synth {

PromptEmbedding embed_prompt(const std::string& prompt, int64_t text_len, int64_t text_dim) {
  VDT_CHECK(text_len >= 1 && text_dim >= 1, "embed_prompt: text_len and text_dim must be >= 1");
  PromptEmbedding e;
  e.rows = torch::zeros({text_len, text_dim}, torch::kFloat);
  const auto tokens = split(prompt, ' ');
  e.length = std::min<int64_t>(static_cast<int64_t>(tokens.size()), text_len);
  for (int64_t l = 0; l < e.length; ++l) {
    const auto pieces = split(tokens[l], ':');
    auto row = torch::zeros({text_dim}, torch::kFloat);
    for (const auto& piece : pieces)
      row += normal_draws(RngStream(fnv1a64(piece), rng_purpose::kSynthToken), 0, 0, {text_dim});
    e.rows[l] = row / std::sqrt(static_cast<double>(std::max<size_t>(pieces.size(), 1)));
  }
  return e;
}

std::vector<int64_t> collapse_parts() { return {0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 9}; }

}  // namespace synth

SynthReport synth_root(const SynthConfig& cfg) {
  cfg.validate();
  prepare_out_dir(cfg);
  const std::string root = cfg.out;

  // 1. The world: runs (train first, then val) and their clips; the drop rows among the train clips.
  std::vector<Run> runs;
  for (int64_t r = 0; r < cfg.train_runs + cfg.val_runs; ++r) runs.push_back(draw_run(cfg, r, r >= cfg.train_runs));
  std::vector<Clip> clips;
  for (int64_t r = 0; r < static_cast<int64_t>(runs.size()); ++r) {
    const int64_t n = runs[r].val ? cfg.val_clips_per_run : cfg.train_clips_per_run;
    for (int64_t c = 0; c < n; ++c) clips.push_back(draw_clip(cfg, runs[r], r, c));
  }
  const int64_t n_train = cfg.train_runs * cfg.train_clips_per_run;
  std::vector<int64_t> train_idx(n_train);
  for (int64_t i = 0; i < n_train; ++i) train_idx[i] = i;
  for (int64_t i : Draws(cfg.seed, rng_purpose::kSynthDrop, 0, 0).sample(train_idx, static_cast<size_t>(cfg.n_drop)))
    clips[i].drop = true;

  // 2. Id maps, frames and the normalisation of the VAE (latents ~zero-mean, unit RMS over the whole root).
  std::vector<torch::Tensor> ids, rgb;
  for (const auto& clip : clips) {
    ids.push_back(render_ids(cfg, clip));
    rgb.push_back(synth::ids_to_rgb(ids.back()));  // [F, 3, Hs, Ws]
  }
  auto vae = SynthVae::random(cfg.latent_channels, cfg.sem_scale, cfg.seed);
  const auto all_rgb = torch::cat(rgb);                          // [N*F, 3, Hs, Ws]
  const auto mean = all_rgb.to(torch::kDouble).mean({0, 2, 3});  // [3]
  const std::array<double, 3> shift = {mean[0].item<double>(), mean[1].item<double>(), mean[2].item<double>()};
  // --flat: each latent frame its mean over the picture, per channel ([C, F, H, W], the mean over H and W).
  const auto flat_if = [&](const torch::Tensor& z) {
    return cfg.flat ? z.mean({-2, -1}, /*keepdim=*/true).expand_as(z).contiguous() : z;
  };
  vae.set_normalisation(shift, 1.0);
  const double rms = flat_if(vae.encode(all_rgb)).to(torch::kDouble).square().mean().sqrt().item<double>();
  vae.set_normalisation(shift, rms > 0 ? 1.0 / rms : 1.0);
  vae.save(root + "/vae.safetensors");

  // 3. Per clip: latents, ids, camera; the index rows.
  std::set<std::string> prompts = {""};
  std::string index;
  const bool h3 = cfg.family() == "h3";
  for (size_t i = 0; i < clips.size(); ++i) {
    const auto& clip = clips[i];
    const auto latents = flat_if(vae.encode(rgb[i])).to(torch::kBFloat16);  // [C, F, H, W]
    if (h3) {  // the video stream, Picture 1 (its first frame) native and at twice the size; one prompt
      const auto pic = latents.narrow(1, 0, 1).contiguous();  // [C, 1, H, W]
      const auto pic2 = torch::upsample_nearest2d(pic.to(torch::kFloat32), {2 * cfg.latent_h, 2 * cfg.latent_w})
                            .to(torch::kBFloat16);  // [C, 1, 2H, 2W]
      save_safetensors(root + "/latents/" + clip.id + ".safetensors",
                       {{"latents", latents}, {"picture1", pic}, {"picture1_2048", pic2}});
      const std::string prompt = h3_prompt(clip_cells(cfg, clip)[0]);
      prompts.insert(prompt);
      index += json{{"clip_id", clip.id},
                    {"split", clip.run->val ? "val" : "train"},
                    {"run", clip.run->name},
                    {"drop", clip.drop},
                    {"cells", {prompt}}}
                   .dump() +
               "\n";
      continue;
    }
    save_safetensors(root + "/latents/" + clip.id + ".safetensors", {{"latents", latents}});
    save_safetensors(root + "/cond/" + clip.id + ".safetensors", {{"ids", ids[i]}});  // [F, Hs, Ws]
    json w2i = json::array();
    for (int64_t f = 0; f < cfg.latent_frames; ++f) {
      const auto m = world_to_image(*clip.run, f);
      w2i.push_back({{m[0], m[1], m[2]}, {m[3], m[4], m[5]}});
    }
    write_file_atomic(root + "/meta/" + clip.id + ".json", json{{"world_to_image", w2i}}.dump() + "\n");
    const auto cells = clip_cells(cfg, clip);
    prompts.insert(cells.begin(), cells.end());
    index += json{{"clip_id", clip.id},
                  {"split", clip.run->val ? "val" : "train"},
                  {"run", clip.run->name},
                  {"drop", clip.drop},
                  {"cells", cells}}
                 .dump() +
             "\n";
  }

  // 4. Text table: every distinct prompt once, the null prompt first (row of zeros, length 0).
  const std::vector<std::string> table(prompts.begin(), prompts.end());  // "" sorts first
  auto emb = torch::zeros({static_cast<int64_t>(table.size()), cfg.text_len, cfg.text_dim}, torch::kFloat);
  auto lengths = torch::zeros({static_cast<int64_t>(table.size())}, torch::kInt);
  for (size_t n = 0; n < table.size(); ++n) {
    const auto e = synth::embed_prompt(table[n], cfg.text_len, cfg.text_dim);
    emb[n] = e.rows;
    lengths[n] = e.length;
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {{"embeddings", emb.to(torch::kBFloat16)},
                                                                {"lengths", lengths}};
  if (h3) {  // token tags: the vision tokens of "<Picture 1>:" take the video AdaLN (0), the rest are text (1)
    auto tags = torch::ones({static_cast<int64_t>(table.size()), cfg.text_len}, torch::kUInt8);
    for (size_t n = 0; n < table.size(); ++n) {
      const auto tokens = split(table[n], ' ');
      for (size_t l = 0; l < tokens.size() && static_cast<int64_t>(l) < cfg.text_len; ++l)
        if (tokens[l] == kVisionToken) tags[static_cast<int64_t>(n)][static_cast<int64_t>(l)] = 0;
    }
    tensors.emplace_back("tags", tags);
    save_safetensors(root + "/audio_silence.safetensors", {{"silence", synth_silence(cfg.audio_channels, cfg.seed)}});
  }
  save_safetensors(root + "/text_table.safetensors", tensors,
                   {{"prompts", json(table).dump()}, {"encoder", "vdt-synth-hashed-tokens/1"}});

  // 5. The index, then dataset.json last.
  write_file_atomic(root + "/index/clips.jsonl", index);
  SynthReport rep;
  rep.res = std::to_string(cfg.latent_w * 16) + "x" + std::to_string(cfg.latent_h * 16);
  json dataset = {{"format", "vdt-latents/1"},
                  {"res", rep.res},
                  {"latent_channels", cfg.latent_channels},
                  {"latent_frames", cfg.latent_frames},
                  {"latent_hw", {cfg.latent_h, cfg.latent_w}},
                  {"cells", h3 ? 1 : cfg.latent_frames},
                  {"text_dim", cfg.text_dim},
                  {"text_len", cfg.text_len},
                  {"null_prompt", ""}};
  if (h3) {
    dataset["model_family"] = "h3", dataset["audio_channels"] = cfg.audio_channels;
    // picture1_2048 is Picture 1 at twice its latent size: its short edge in pixels
    dataset["picture1_short_edge"] = 2 * 16 * std::min(cfg.latent_h, cfg.latent_w);
  } else {
    dataset["sem_scale"] = cfg.sem_scale, dataset["vocab"] = "parts",
    dataset["collapse_parts"] = synth::collapse_parts();
  }
  write_file_atomic(root + "/dataset.json", dataset.dump(2) + "\n");

  rep.n_train = n_train;
  rep.n_val = cfg.val_runs * cfg.val_clips_per_run;
  rep.n_drop = cfg.n_drop;
  rep.n_prompts = static_cast<int64_t>(table.size());
  return rep;
}

}  // namespace vdt
