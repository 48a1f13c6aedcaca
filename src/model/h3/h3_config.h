// MiniMax-H3 DiT architecture (docs/h3_model.md §1.1): the config, its presets (`minimax-h3`, `h3-tiny`), the
// DiffSynth constructor-argument JSON (fixture `config` metadata), detection from checkpoint shapes and the full
// list of checkpoint tensors a config implies (counted without building the model).
// Shape legend as model/config.h, plus S packed rows, M unique timesteps, Dv = 96 video row width, Da = 32 audio.
// Not here: the module (h3_dit), the packed layout (h3_packer) or reading files (h3_weights).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vdt {

struct H3Config {
  std::string preset = "minimax-h3";
  int64_t num_layers = 50;
  int64_t refiner_layers = 2;                // token refiner blocks (text only)
  int64_t hidden = 5376;                     // residual width D
  int64_t heads = 56;                        // N
  int64_t head_dim = 128;                    // Dh; attention inner width N*Dh (7168) differs from D
  int64_t ffn = 14336;                       // SwiGLU inner width (fc1 gives 2*ffn)
  int64_t latent_channels = 24;              // video latent C
  int64_t audio_channels = 32;               // audio latent width Da
  std::array<int64_t, 3> patch = {1, 2, 2};  // (t, h, w)
  int64_t text_dim = 5120;                   // Qwen3-VL hidden
  int64_t time_freq_dim = 256;               // sinusoid width
  int64_t time_hidden = 5376;                // time MLP hidden
  int64_t time_dim = 2688;                   // time MLP output (AdaLN input)
  int64_t rope_len = 16;                     // frequencies per axis; 6*rope_len head channels are rotated
  double norm_eps = 1e-5;
  double qk_norm_eps = 1e-5;
  double final_norm_eps = 1e-5;

  int64_t inner() const { return heads * head_dim; }
  int64_t video_dim() const { return latent_channels * patch[0] * patch[1] * patch[2]; }  // Dv
  int64_t adaln_out() const { return 3 * 6 * hidden; }                                    // 3 modalities x 6 chunks
  int64_t final_adaln_out() const { return 2 * hidden; }
  // Throws naming the field, value and fix when the config cannot describe an H3 DiT.
  void validate() const;
  // The DiffSynth `MiniMaxH3DiT(**kwargs)` spelling (num_layers, hidden_size, ..., rope_inv_freq_len).
  std::string to_json() const;
  // Missing keys take DiffSynth's constructor defaults (the real model); adaln_out_features and
  // final_adaln_out_features, when present, must agree with hidden_size.
  static H3Config from_json(const std::string& json, const std::string& where);
  bool same_architecture(const H3Config& o) const;
};

// Named presets: minimax-h3 (the released 33B DiT), h3-tiny (the fixtures' config). Unknown names throw.
H3Config h3_preset(const std::string& name);
std::vector<std::string> h3_preset_names();

// Every checkpoint tensor (name -> shape) of this architecture, in the checkpoint's naming: 535 for minimax-h3.
std::map<std::string, std::vector<int64_t>> h3_checkpoint_shapes(const H3Config& cfg);

// Architecture from checkpoint shapes (name -> shape, an optional "model." prefix already stripped); the preset
// name is set when one matches, else "custom". Eps cannot be read from shapes: they keep the default 1e-5.
H3Config detect_h3_config(const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& where);

}  // namespace vdt
