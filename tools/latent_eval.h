// `vdt eval`: the distribution distance between generated latent clips and the data's (docs/cli.md "vdt eval"). The
// generated set is a directory of `vdt sample` outputs (each file one clip, `sample` or `conditioned`); the reference
// set is a data root's latents, cut into windows of the generated clips' length, or another directory of sample
// outputs (their `ground_truth`). Each clip becomes the feature vector of train/eval/clip_features.h; the result is
// the Fréchet distance of the two sets (train/eval/frechet.h), over all features and per feature group.
// Not here: sampling (`vdt sample`), the features' definition.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/loop/config_fields.h"

namespace vdt {

struct LatentEvalConfig {
  std::string generated;     // a directory of sample files, or one file
  std::string key = "auto";  // tensor of a generated file; auto: sample, else conditioned
  std::string reference;     // a data root (dataset.json), or a directory of sample files, or one file
  std::string reference_key = "ground_truth";  // tensor of a reference sample file
  std::string split = "all";                   // data root: all | train | val (drop:true clips never)
  int64_t skip_frames = 0;                     // leading latent frames left out of every clip of both sets
  std::string out;                             // a JSON file for the result (empty: none)
  void validate() const;                       // throws naming the flag
  static const std::vector<ConfigField<LatentEvalConfig>>& fields();
};

struct LatentEvalReport {
  int64_t n_generated = 0, n_reference = 0;
  std::vector<int64_t> clip_shape;  // [C, F, H, W] after --skip-frames
  std::string key;                  // the generated files' tensor that was read
  int64_t features = 0;
  double distance = 0;                                 // Fréchet distance over all features
  std::vector<std::pair<std::string, double>> groups;  // the distance over each group's features alone
  std::string json() const;
};

// Reads both sets, computes the distance, writes cfg.out when given. Errors name the file or flag and the fix.
LatentEvalReport run_latent_eval(const LatentEvalConfig& cfg);

}  // namespace vdt
