// `vdt data synth OUT`: writes the small, learnable synthetic data root (tools/synth.h) the demo and tests train on.
#include <cstdio>

#include "cli/commands.h"
#include "tools/synth.h"

namespace vdt::cli {

void add_data_synth(CLI::App& data_cmd, int& exit_code) {
  auto cfg = std::make_shared<SynthConfig>();
  auto hw = std::make_shared<std::vector<int64_t>>();
  auto* sub = data_cmd.add_subcommand(
      "synth", "Write a synthetic data root: parts moving on a plane, a fixed random linear VAE, hashed-token text");
  sub->add_option("out", cfg->out, "root directory to create")->required();
  sub->add_option(spellings("--seed"), cfg->seed, "seed of the world, the VAE and the drop rows")
      ->capture_default_str();
  sub->add_option(spellings("--model"), cfg->model,
                  "wan, or h3: an H3 root (Picture 1, silent audio; h3-tiny's "
                  "24 channels, text_dim 48 and a 32-latent stream unless given)")
      ->capture_default_str();
  sub->add_option(spellings("--audio_channels"), cfg->audio_channels, "h3: audio latent width")->capture_default_str();
  sub->add_option(spellings("--latent_frames"), cfg->latent_frames, "latent frames F (= prompt cells)")
      ->capture_default_str();
  sub->add_option(spellings("--latent_h"), cfg->latent_h, "latent height H")->capture_default_str();
  sub->add_option(spellings("--latent_w"), cfg->latent_w, "latent width W")->capture_default_str();
  sub->add_option(spellings("--latent_hw"), *hw, "latent H W (overrides --latent_h/--latent_w)")->expected(2);
  sub->add_option(spellings("--channels"), cfg->latent_channels, "latent channels C")->capture_default_str();
  sub->add_option(spellings("--sem_scale"), cfg->sem_scale, "id map pixels per latent pixel (ids are [F, H*s, W*s])")
      ->capture_default_str();
  sub->add_option(spellings("--text_dim"), cfg->text_dim, "text embedding width")->capture_default_str();
  sub->add_option(spellings("--text_len"), cfg->text_len, "text tokens per prompt")->capture_default_str();
  sub->add_option(spellings("--train_runs"), cfg->train_runs, "train runs")->capture_default_str();
  sub->add_option(spellings("--train_clips_per_run"), cfg->train_clips_per_run, "clips per train run")
      ->capture_default_str();
  sub->add_option(spellings("--val_runs"), cfg->val_runs, "val runs (disjoint from the train runs)")
      ->capture_default_str();
  sub->add_option(spellings("--val_clips_per_run"), cfg->val_clips_per_run, "clips per val run")->capture_default_str();
  sub->add_option(spellings("--n_drop"), cfg->n_drop, "train clips marked drop:true")->capture_default_str();
  sub->add_flag(
         spellings("--flat"), cfg->flat,
         "each latent frame its mean over the picture, per channel (a root any model learns fast: the FP8 gate's)")
      ->option_text(default_of(cfg->flat));
  sub->add_flag(spellings("--overwrite"), cfg->overwrite, "replace the synth entries of a non-empty OUT")
      ->option_text(default_of(cfg->overwrite));
  sub->callback([cfg, hw, sub, &exit_code] {
    if (cfg->model == "h3") {  // h3-tiny's widths and a stream of 6 VAE clips + 2 latents, unless given
      if (sub->count("--channels") == 0) cfg->latent_channels = 24;
      if (sub->count("--text_dim") == 0) cfg->text_dim = 48;
      if (sub->count("--latent_frames") == 0) cfg->latent_frames = 32;
    }
    if (!hw->empty()) {
      cfg->latent_h = (*hw)[0];
      cfg->latent_w = (*hw)[1];
    }
    cfg->validate();
    const auto r = synth_root(*cfg);
    std::printf(
        "data synth %s: %s root, %lld train (%lld drop) + %lld val clips, %lld prompts, res %s, latents [%lld, "
        "%lld, %lld, %lld] bf16, ",
        cfg->out.c_str(), cfg->model.c_str(), static_cast<long long>(r.n_train), static_cast<long long>(r.n_drop),
        static_cast<long long>(r.n_val), static_cast<long long>(r.n_prompts), r.res.c_str(),
        static_cast<long long>(cfg->latent_channels), static_cast<long long>(cfg->latent_frames),
        static_cast<long long>(cfg->latent_h), static_cast<long long>(cfg->latent_w));
    if (cfg->model == "h3")
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
