// Wan DiT architecture configuration, its presets, and preset detection from checkpoint names and shapes.
// Shape legend for all of model/: B batch, C latent channels, F latent frames, H/W latent height/width,
// L tokens, Lt text tokens, D width, N heads, Dh head dim, G timestep groups (1, F or L).
// Not here: anything about training, data or files beyond reading names and shapes.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vdt {

struct ModelConfig {
  std::string preset = "wan2.2-ti2v-5b";
  int64_t dim = 3072;
  int64_t ffn_dim = 14336;
  int64_t num_heads = 24;
  int64_t num_layers = 30;
  int64_t in_dim = 48;
  int64_t out_dim = 48;
  int64_t text_dim = 4096;
  int64_t freq_dim = 256;
  double eps = 1e-6;
  std::array<int64_t, 3> patch = {1, 2, 2};  // (t, h, w)

  int64_t head_dim() const { return dim / num_heads; }
  int64_t patch_volume() const { return patch[0] * patch[1] * patch[2]; }
  // Throws naming the field, value and fix when the configuration cannot describe a Wan DiT.
  void validate() const;
  // The Wan `config.json` spelling (dim, ffn_dim, ..., patch_size), as found in fixture metadata.
  std::string to_json() const;
  static ModelConfig from_json(const std::string& json, const std::string& where);
  bool same_architecture(const ModelConfig& o) const;
};

// Named presets: wan2.2-ti2v-5b, wan2.1-t2v-1.3b, tiny. Unknown names throw listing the known ones.
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

// Infers the architecture from checkpoint tensor shapes (name -> shape); the preset name is set when one matches,
// else "custom". Throws listing what is missing when the names are not a Wan DiT.
ModelConfig detect_config(const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& where);

}  // namespace vdt
