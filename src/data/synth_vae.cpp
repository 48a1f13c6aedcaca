// SynthVae: patchify / linear map / unpatchify, plus the fixed part colour table. The pseudo-inverse is computed in
// float64 (torch::linalg_pinv) so the decoder is exact to float32 rounding.
#include "core/rng_purposes.h"
#include "data/synth_vae.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"

namespace vdt {
namespace synth {
namespace {

// Hand-picked, mutually distinct colours; id 0 is a dark floor.
constexpr float kColours[kNumParts][3] = {
    {0.30f, 0.30f, 0.34f}, {0.90f, 0.10f, 0.10f}, {0.10f, 0.70f, 0.20f}, {0.15f, 0.30f, 0.95f}, {0.95f, 0.85f, 0.10f},
    {0.90f, 0.20f, 0.85f}, {0.10f, 0.85f, 0.90f}, {0.95f, 0.55f, 0.10f}, {0.55f, 0.20f, 0.85f}, {0.60f, 0.95f, 0.30f},
    {0.95f, 0.60f, 0.70f}, {0.10f, 0.45f, 0.45f}, {0.60f, 0.40f, 0.20f}, {0.95f, 0.95f, 0.95f}, {0.05f, 0.05f, 0.05f},
    {0.50f, 0.55f, 0.95f}, {0.45f, 0.05f, 0.15f}, {0.65f, 0.65f, 0.20f}, {0.10f, 0.20f, 0.45f}, {0.85f, 0.75f, 0.55f},
};

}  // namespace

torch::Tensor part_colours() {
  return torch::from_blob(const_cast<float*>(&kColours[0][0]), {kNumParts, 3}, torch::kFloat).clone();
}

torch::Tensor ids_to_rgb(const torch::Tensor& ids) {
  VDT_CHECK(ids.scalar_type() == torch::kByte && ids.dim() >= 2, "ids_to_rgb: expected uint8 [..., Hs, Ws], got ",
            ids.scalar_type(), " ", ids.sizes());
  // Row kNumParts of the lookup table is the UNKNOWN grey; every other out-of-vocabulary id is an error.
  auto idx = ids.to(torch::kCPU).to(torch::kLong);
  const auto unknown = idx == kUnknownId;
  VDT_CHECK((unknown | (idx < kNumParts)).all().item<bool>(), "ids_to_rgb: ids outside 0..", kNumParts - 1, " and ",
            int(kUnknownId));
  idx = torch::where(unknown, torch::full_like(idx, kNumParts), idx);
  const auto table = torch::cat({part_colours(), torch::full({1, 3}, 0.5f)});
  auto rgb = table.index({idx});            // [..., Hs, Ws, 3]
  return rgb.movedim(-1, -3).contiguous();  // [..., Hs, Ws, 3] -> [..., 3, Hs, Ws]
}

torch::Tensor normal_draws(const RngStream& stream, uint64_t a, uint32_t b, const std::vector<int64_t>& shape) {
  auto out = torch::empty(shape, torch::kFloat);
  float* p = out.data_ptr<float>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double u1 = stream.uniform(a, b, static_cast<uint32_t>(2 * i));
    const double u2 = stream.uniform(a, b, static_cast<uint32_t>(2 * i + 1));
    p[i] = static_cast<float>(std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2));
  }
  return out;
}

}  // namespace synth

SynthVae SynthVae::random(int64_t latent_channels, int64_t sem_scale, uint64_t seed) {
  VDT_CHECK(latent_channels >= 1 && sem_scale >= 1, "SynthVae: latent_channels and sem_scale must be >= 1, got ",
            latent_channels, " and ", sem_scale);
  const int64_t p = 3 * sem_scale * sem_scale;
  SynthVae vae;
  vae.sem_scale_ = sem_scale;
  vae.encoder_ = synth::normal_draws(RngStream(seed, rng_purpose::kSynthVae), 0, 0, {latent_channels, p}) /
                 std::sqrt(static_cast<double>(p));
  vae.decoder_ = torch::linalg_pinv(vae.encoder_.to(torch::kDouble)).to(torch::kFloat).contiguous();
  return vae;
}

void SynthVae::set_normalisation(const std::array<double, 3>& rgb_shift, double latent_scale) {
  VDT_CHECK(std::isfinite(latent_scale) && latent_scale > 0, "SynthVae: latent_scale must be finite and > 0, got ",
            latent_scale);
  rgb_shift_ = rgb_shift;
  latent_scale_ = latent_scale;
}

SynthVae SynthVae::open(const std::string& root) {
  const std::string path = root + "/vae.safetensors";
  const auto f = SafetensorsFile::open(path);
  for (const char* key : {"encoder", "decoder"})
    VDT_CHECK(f->contains(key), path, ": missing tensor '", key, "'\n---> HINT: write the root with `vdt data synth`");
  const auto& meta = f->metadata();
  for (const char* key : {"sem_scale", "latent_scale", "rgb_shift"})
    VDT_CHECK(meta.count(key), path, ": metadata lacks '", key, "'");
  SynthVae vae;
  try {
    vae.sem_scale_ = metadata_int(meta, "sem_scale", path, 0);
    const double scale = metadata_double(meta, "latent_scale", path, 0);
    const auto shift = nlohmann::json::parse(meta.at("rgb_shift")).get<std::vector<double>>();
    VDT_CHECK(shift.size() == 3, "rgb_shift must have 3 values");
    vae.set_normalisation({shift[0], shift[1], shift[2]}, scale);
  } catch (const std::exception& e) {
    VDT_FAIL(path, ": bad metadata (sem_scale '", meta.at("sem_scale"), "', latent_scale '", meta.at("latent_scale"),
             "', rgb_shift '", meta.at("rgb_shift"), "'): ", e.what());
  }
  VDT_CHECK(vae.sem_scale_ >= 1, path, ": metadata sem_scale must be >= 1, got ", vae.sem_scale_);
  vae.encoder_ = f->get("encoder").to(torch::kFloat).clone();
  vae.decoder_ = f->get("decoder").to(torch::kFloat).clone();
  const int64_t p = 3 * vae.sem_scale_ * vae.sem_scale_;
  VDT_CHECK(vae.encoder_.dim() == 2 && vae.encoder_.size(1) == p, path, ": 'encoder' must be [C, ", p,
            "] for sem_scale ", vae.sem_scale_, ", got ", vae.encoder_.sizes());
  VDT_CHECK(vae.decoder_.dim() == 2 && vae.decoder_.size(0) == p && vae.decoder_.size(1) == vae.encoder_.size(0), path,
            ": 'decoder' must be [", p, ", ", vae.encoder_.size(0), "], got ", vae.decoder_.sizes());
  return vae;
}

void SynthVae::save(const std::string& path) const {
  const nlohmann::json shift = {rgb_shift_[0], rgb_shift_[1], rgb_shift_[2]};
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.9g", latent_scale_);
  save_safetensors(path, {{"encoder", encoder_}, {"decoder", decoder_}},
                   {{"format", "vdt-synth-vae/1"},
                    {"sem_scale", std::to_string(sem_scale_)},
                    {"latent_channels", std::to_string(latent_channels())},
                    {"latent_scale", scale},
                    {"rgb_shift", shift.dump()},
                    {"patch_order", "c,dy,dx"},
                    {"formula",
                     "latent = latent_scale * encoder @ (patch - rgb_shift); patch = decoder @ latent / "
                     "latent_scale + rgb_shift"}});
}

torch::Tensor SynthVae::encode(const torch::Tensor& rgb) const {
  const int64_t s = sem_scale_;
  TORCH_CHECK(rgb.dim() == 4 && rgb.size(1) == 3 && rgb.size(2) % s == 0 && rgb.size(3) % s == 0,
              "SynthVae::encode: expected [F, 3, H*", s, ", W*", s, "], got ", rgb.sizes());
  const int64_t f = rgb.size(0), h = rgb.size(2) / s, w = rgb.size(3) / s;
  const auto shift = torch::tensor({rgb_shift_[0], rgb_shift_[1], rgb_shift_[2]}, torch::kFloat).view({1, 3, 1, 1});
  auto x = rgb.to(torch::kCPU, torch::kFloat) - shift;
  x = x.view({f, 3, h, s, w, s}).permute({0, 2, 4, 1, 3, 5}).reshape({f, h, w, 3 * s * s});  // -> [F, H, W, 3 s^2]
  auto z = torch::matmul(x, encoder_.t()) * latent_scale_;                                   // [F, H, W, C]
  return z.permute({3, 0, 1, 2}).contiguous();                                               // [C, F, H, W]
}

torch::Tensor SynthVae::decode(const torch::Tensor& latents) const {
  const int64_t s = sem_scale_, c = latent_channels();
  TORCH_CHECK(latents.dim() == 4 && latents.size(0) == c, "SynthVae::decode: expected [", c, ", F, H, W], got ",
              latents.sizes());
  const int64_t f = latents.size(1), h = latents.size(2), w = latents.size(3);
  auto z = latents.to(torch::kCPU, torch::kFloat).permute({1, 2, 3, 0}) / latent_scale_;     // [F, H, W, C]
  auto x = torch::matmul(z, decoder_.t());                                                   // [F, H, W, 3 s^2]
  x = x.view({f, h, w, 3, s, s}).permute({0, 3, 1, 4, 2, 5}).reshape({f, 3, h * s, w * s});  // -> [F, 3, Hs, Ws]
  const auto shift = torch::tensor({rgb_shift_[0], rgb_shift_[1], rgb_shift_[2]}, torch::kFloat).view({1, 3, 1, 1});
  return (x + shift).clamp(0, 1).contiguous();
}

}  // namespace vdt
