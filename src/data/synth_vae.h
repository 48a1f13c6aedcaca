// The fixed random linear "VAE" of synthetic data roots (`vdt data synth`): a frame is coloured by part id (a fixed
// table of 20 colours), each s x s patch of it is flattened (order c, dy, dx) and multiplied by a random encoder
// [C, 3 s^2]; the decoder is its pseudo-inverse. It stands in for Wan's VAE in tests, the demo and sample previews.
// Not here: scene generation and the data root (tools/synth.h), any learned or nonlinear VAE.
#pragma once
#include <torch/types.h>

#include <array>
#include <string>
#include <vector>

#include "core/rng.h"

namespace vdt {
namespace synth {

constexpr int64_t kNumParts = 20;    // part ids 0..19; 0 is the floor (background)
constexpr uint8_t kUnknownId = 255;  // "no information" in an id map

// [kNumParts, 3] float32 in [0, 1]: the fixed colour of each part id.
torch::Tensor part_colours();
// ids [..., Hs, Ws] uint8 -> [..., 3, Hs, Ws] float32 colours; UNKNOWN (255) renders as mid grey 0.5.
torch::Tensor ids_to_rgb(const torch::Tensor& ids);
// Standard normal float32 values of `shape` from `stream` at counters (a, b) (Box-Muller over uniform draws):
// platform-independent, unlike torch's generators.
torch::Tensor normal_draws(const RngStream& stream, uint64_t a, uint32_t b, const std::vector<int64_t>& shape);

}  // namespace synth

class SynthVae {
 public:
  // Encoder N(0, 1/(3 s^2)) drawn from `seed`, decoder = pinv(encoder); identity normalisation (shift 0, scale 1).
  static SynthVae random(int64_t latent_channels, int64_t sem_scale, uint64_t seed);
  // Reads <root>/vae.safetensors; every missing key, bad shape or metadata field is an error naming the file.
  static SynthVae open(const std::string& root);
  void save(const std::string& path) const;

  // latent = latent_scale * encoder . (patch - rgb_shift): set so that a root's latents are ~zero-mean, unit-RMS.
  void set_normalisation(const std::array<double, 3>& rgb_shift, double latent_scale);

  // [F, 3, H*s, W*s] float in [0, 1] -> [C, F, H, W] float32.
  torch::Tensor encode(const torch::Tensor& rgb) const;
  // [C, F, H, W] (any float dtype) -> [F, 3, H*s, W*s] float32 clamped to [0, 1]. decode(encode(x)) == x when
  // C >= 3 s^2 (the encoder is injective), else the least-squares reconstruction.
  torch::Tensor decode(const torch::Tensor& latents) const;

  int64_t latent_channels() const { return encoder_.size(0); }
  int64_t sem_scale() const { return sem_scale_; }
  double latent_scale() const { return latent_scale_; }
  const std::array<double, 3>& rgb_shift() const { return rgb_shift_; }
  const torch::Tensor& encoder() const { return encoder_; }  // [C, 3 s^2] float32
  const torch::Tensor& decoder() const { return decoder_; }  // [3 s^2, C] float32

 private:
  torch::Tensor encoder_, decoder_;
  int64_t sem_scale_ = 1;
  std::array<double, 3> rgb_shift_ = {0, 0, 0};
  double latent_scale_ = 1.0;
};

}  // namespace vdt
