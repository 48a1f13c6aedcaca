// `vdt data synth`: writes a small, learnable data root (docs/design.md §3 format): parts moving on a plane seen by a
// slowly panning camera, id maps rendered per latent frame, latents from the fixed random linear SynthVae, one prompt
// per latent frame naming each part's motion, and a hashed-token text table. Deterministic in --seed. With model "h3"
// an H3 root (data/h3_root.h): one prompt per clip led by "<Picture 1>:" and its vision tokens (tag 0 in the table),
// each clip's Picture 1 (its first latent frame; the 2048 one twice the size), a plausible silent audio latent
// (one fixed vector repeated, the first steps perturbed as an encoder's zero padding would), no id maps.
// Not here: reading or checking roots (src/data/), real VAEs or text encoders.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/synth_vae.h"
#include "train/loop/config_sections.h"

namespace vdt {

struct SynthConfig {
  std::string out;               // root directory to create
  std::string model = "wan";     // the base the root is for: a family (wan, h3) or one of its presets
  int64_t audio_channels = 32;   // h3: audio latent width Da
  int64_t latent_channels = 16;  // C (the `tiny` preset's in_dim)
  int64_t latent_frames = 5;     // F, also the number of prompt cells
  int64_t latent_h = 8, latent_w = 8;
  std::vector<int64_t> latent_hw;  // --latent_hw H W: both at once (the command line applies it over the two)
  int64_t sem_scale = 2;           // id maps are [F, H*s, W*s]
  int64_t text_dim = 64, text_len = 16;
  int64_t train_runs = 6, train_clips_per_run = 4;
  int64_t val_runs = 2, val_clips_per_run = 2;  // val clips come from their own runs (no run leak)
  int64_t n_drop = 2;                           // train clips marked drop:true
  uint64_t seed = 0;
  // Each latent frame its spatial mean per channel (then normalised to unit RMS): the scene survives only as one
  // vector a frame, which the text names, so a model can drive the loss far down in a few hundred steps (the FP8
  // accuracy gate's root, benchmarks/loss_gate.sh). The id maps still show the scene.
  bool flat = false;
  bool overwrite = false;      // replace the synth entries of an existing non-empty directory
  void validate() const;       // throws naming the flag, the value and the allowed range
  std::string family() const;  // wan or h3: --model's family
  static const std::vector<ConfigField<SynthConfig>>& fields();
};

struct SynthReport {
  int64_t n_train = 0, n_val = 0, n_drop = 0;
  int64_t n_prompts = 0;  // rows of the text table, the null prompt included
  std::string res;        // "<W>x<H>" in pixels (latent * 16)
};

// Writes the root. A non-empty `out` is refused unless cfg.overwrite, which removes only the entries a synth root
// consists of (dataset.json, index/, latents/, cond/, meta/, text_table.safetensors, vae.safetensors).
// dataset.json is written last, so an interrupted run leaves no root that looks complete.
SynthReport synth_root(const SynthConfig& cfg);

namespace synth {

struct PromptEmbedding {
  torch::Tensor rows;  // [text_len, text_dim] float32; rows >= length are zero
  int64_t length = 0;  // min(#tokens, text_len)
};
// Hashed-token text encoder: the prompt splits on spaces; token l's row is a fixed N(0, 1) vector seeded by the
// FNV-1a hash of the token (a token "a:b" is the sum of the vectors of "a" and "b" over sqrt 2, so a row binds a
// part to its motion). Independent of the root's seed. "" gives all zeros and length 0.
PromptEmbedding embed_prompt(const std::string& prompt, int64_t text_len, int64_t text_dim);

// The 20 part ids folded to the 10-class "ids" vocabulary (dataset.json "collapse_parts").
std::vector<int64_t> collapse_parts();

}  // namespace synth
}  // namespace vdt
