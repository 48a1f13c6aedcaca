// `vdt sample`: Euler + CFG samples of validation clips from an SFT export; writes latents and, when the data root
// has the synthetic VAE (vae.safetensors), a PNG per clip: ground truth / with conditions / without conditions.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/safetensors.h"
#include "core/png.h"
#include "tools/preview.h"
#include "tools/synth_vae.h"
#include "train/export.h"
#include "train/sampling.h"

namespace vdt::cli {

void add_sample(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string ckpt, data_root, out, split = "val", device = "cpu", res;
    int64_t n = 2, steps = 30;
    double cfg = 5.0, shift = 5.0;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* s = app.add_subcommand("sample", "Sample clips of a data root with an SFT export (Euler, two-branch CFG)");
  s->add_option("--ckpt", o->ckpt, "step-N.safetensors from `vdt train sft`")->required()->check(CLI::ExistingFile);
  s->add_option("--data_root", o->data_root, "data root giving ids, text and frame 0")->required();
  s->add_option("--out", o->out, "output directory")->required();
  s->add_option("--split", o->split, "split to sample from")->capture_default_str();
  s->add_option("--n", o->n, "number of clips")->capture_default_str();
  s->add_option("--steps", o->steps, "Euler steps")->capture_default_str();
  s->add_option("--cfg", o->cfg, "guidance scale")->capture_default_str();
  s->add_option("--shift", o->shift, "sigma shift of the inference grid")->capture_default_str();
  s->add_option("--device", o->device, "cpu or cuda")->capture_default_str();
  s->add_option("--res", o->res, "resolution (default: the checkpoint's)");
  s->add_option("--seed", o->seed, "noise seed")->capture_default_str();
  s->callback([o, &exit_code] {
    const torch::Device device(o->device == "cuda" ? torch::kCUDA : torch::kCPU);
    auto model = load_checkpoint_model({o->ckpt}, device, device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
    const auto meta = SafetensorsFile::open(o->ckpt)->metadata();
    SftDataConfig dc;
    dc.root = o->data_root, dc.split = o->split, dc.limit = o->n;
    dc.vocab = meta.count("vocab") ? meta.at("vocab") : "parts";
    dc.res = !o->res.empty() ? o->res : meta.count("res") ? meta.at("res") : dc.res;
    SftDataset ds(dc);
    std::filesystem::create_directories(o->out);
    const bool has_vae = std::filesystem::exists(std::filesystem::path(o->data_root) / "vae.safetensors");
    EulerConfig ec;
    ec.steps = o->steps, ec.cfg_scale = o->cfg, ec.shift = o->shift;
    for (size_t i = 0; i < ds.size(); ++i) {
      const auto r = sample_clip(*model, ds, i, ec, o->seed);
      const auto base = (std::filesystem::path(o->out) / r.clip_id).string();
      save_safetensors(base + ".safetensors", {{"ground_truth", r.ground_truth}, {"conditioned", r.conditioned},
                                               {"unconditioned", r.unconditioned}},
                       {{"ckpt", o->ckpt}, {"clip_id", r.clip_id}});
      const double e_c = (r.conditioned - r.ground_truth).slice(1, 1).pow(2).mean().item<double>();
      const double e_u = (r.unconditioned - r.ground_truth).slice(1, 1).pow(2).mean().item<double>();
      std::printf("sample %s: mse vs ground truth (frames 1..) with conditions %.4f, without %.4f -> %s.safetensors\n",
                  r.clip_id.c_str(), e_c, e_u, base.c_str());
      if (has_vae) {
        const auto vae = SynthVae::open(o->data_root);
        write_png(base + ".png", frame_grid({vae.decode(r.ground_truth), vae.decode(r.conditioned),
                                             vae.decode(r.unconditioned)}, 2, 4));
        std::printf("  preview %s.png (rows: ground truth, with conditions, without)\n", base.c_str());
      }
    }
    exit_code = 0;
  });
}

}  // namespace vdt::cli
