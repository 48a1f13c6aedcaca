// `vdt data synth OUT`: writes the small, learnable synthetic data root (tools/synth.h) the demo and tests train on.
#include <cstdio>

#include "cli/commands.h"
#include "tools/synth.h"

namespace vdt::cli {

void add_data_synth(CLI::App& data_cmd, int& exit_code) {
  auto cfg = std::make_shared<SynthConfig>();
  auto* sub = data_cmd.add_subcommand(
      "synth", "Write a synthetic data root: parts moving on a plane, a fixed random linear VAE, hashed-token text");
  bind_fields(sub, cfg, SynthConfig::fields());
  sub->callback([cfg, sub, &exit_code] {
    if (cfg->family() == "h3") {  // h3-tiny's widths and a stream of 6 VAE clips + 2 latents, unless given
      if (sub->count("--channels") == 0) cfg->latent_channels = 24;
      if (sub->count("--text_dim") == 0) cfg->text_dim = 48;
      if (sub->count("--latent_frames") == 0) cfg->latent_frames = 32;
    }
    if (cfg->latent_hw.size() == 2) cfg->latent_h = cfg->latent_hw[0], cfg->latent_w = cfg->latent_hw[1];
    cfg->validate();
    const auto r = synth_root(*cfg);
    std::printf(
        "data synth %s: %s root, %lld train (%lld drop) + %lld val clips, %lld prompts, res %s, latents [%lld, "
        "%lld, %lld, %lld] bf16, ",
        cfg->out.c_str(), cfg->family().c_str(), static_cast<long long>(r.n_train), static_cast<long long>(r.n_drop),
        static_cast<long long>(r.n_val), static_cast<long long>(r.n_prompts), r.res.c_str(),
        static_cast<long long>(cfg->latent_channels), static_cast<long long>(cfg->latent_frames),
        static_cast<long long>(cfg->latent_h), static_cast<long long>(cfg->latent_w));
    if (cfg->family() == "h3")
      std::printf("Picture 1 [%lld, 1, %lld, %lld] (2048: twice), silent audio [2, %lld, 8]",
                  static_cast<long long>(cfg->latent_channels), static_cast<long long>(cfg->latent_h),
                  static_cast<long long>(cfg->latent_w), static_cast<long long>(cfg->audio_channels));
    else
      std::printf("ids [%lld, %lld, %lld]", static_cast<long long>(cfg->latent_frames),
                  static_cast<long long>(cfg->latent_h * cfg->sem_scale),
                  static_cast<long long>(cfg->latent_w * cfg->sem_scale));
    std::printf(", seed %llu\n", static_cast<unsigned long long>(cfg->seed));
    exit_code = 0;
  });
}

}  // namespace vdt::cli
