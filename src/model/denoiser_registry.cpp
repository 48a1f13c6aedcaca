#include "model/denoiser_registry.h"

#include "core/error.h"
#include "model/config.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_lora.h"
#include "model/h3/h3_weights.h"
#include "model/weights_io.h"
#include "model/wan_dit.h"

namespace vdt {

std::vector<std::string> denoiser_presets() {
  auto all = preset_names();
  for (const auto& p : h3_preset_names()) all.push_back(p);
  return all;
}

std::string denoiser_family(const std::string& preset) {
  for (const auto& p : preset_names())
    if (p == preset) return "wan";
  for (const auto& p : h3_preset_names())
    if (p == preset) return "h3";
  std::string known;
  for (const auto& p : denoiser_presets()) known += (known.empty() ? "" : ", ") + p;
  VDT_FAIL("unknown model preset '", preset, "' (known: ", known, ")");
}

std::vector<std::string> family_presets(const std::string& family) {
  std::vector<std::string> out;
  for (const auto& p : denoiser_presets())
    if (denoiser_family(p) == family) out.push_back(p);
  return out;
}

// H3: one VAE clip, 5 latents (docs/h3_model.md §4.1); Wan: 3 latent frames.
int64_t natural_chunk_frames(const std::string& preset) { return denoiser_family(preset) == "h3" ? 5 : 3; }

// H3's Ref2VA image reference (docs/h3_model.md §2); the Wan bases take none.
bool takes_picture1(const std::string& preset) { return denoiser_family(preset) == "h3"; }

std::pair<std::string, std::string> detect_base(const SafetensorsSet& files) {
  for (const auto& k : files.keys())  // H3's video input projection, with or without the "model." prefix
    if (k == "video_patch_proj.weight" || k == "model.video_patch_proj.weight")
      return {"h3", detect_h3_config(files).preset};
  return {"wan", detect_config(files).preset};
}

std::shared_ptr<Denoiser> make_denoiser(const std::string& preset, torch::TensorOptions options, int64_t layers) {
  const std::string family = denoiser_family(preset);
  if (family == "wan") {
    ModelConfig mc = preset_config(preset);
    if (layers > 0) mc.num_layers = layers;
    return WanDiT(mc, options).ptr();
  }
  if (family == "h3") {  // in `options`' dtype with the release's fp32 islands (docs/h3_model.md §1.10)
    H3Config hc = h3_preset(preset);
    if (layers > 0) hc.num_layers = layers;
    H3BuildOptions bo;
    bo.device = options.device(), bo.dtype = options.dtype().toScalarType(), bo.fp32_islands = true;
    bo.init = false;  // zeros on the device: the caller's init_weights or load sets every parameter
    return H3DiT(hc, bo).ptr();
  }
  VDT_FAIL("model family '", family, "' of preset '", preset, "' has no constructor");
}

std::shared_ptr<Denoiser> denoiser_for_weights(const SafetensorsSet& files, torch::TensorOptions options) {
  if (detect_base(files).first == "h3") {
    H3BuildOptions bo;
    bo.device = options.device(), bo.dtype = options.dtype().toScalarType(), bo.fp32_islands = true;
    bo.init = false;  // zeros: the caller loads every parameter
    return H3DiT(detect_h3_config(files), bo).ptr();
  }
  ModelConfig mc = detect_config(files);
  const auto& meta = files.metadata();
  if (meta.count("model_config")) mc = ModelConfig::from_json(meta.at("model_config"), files.files().front()->path());
  return WanDiT(mc, options).ptr();
}

LoraWeights lora_for_model(const Denoiser& model, const LoraWeights& w, const std::string& where) {
  if (const auto* h3 = dynamic_cast<const H3DiTImpl*>(&model); h3 && h3_lora_is_split(w))
    return h3_lora_from_split(w, h3->config().head_dim, where);
  return w;
}

LoraShape lora_shape_for(const std::string& preset, const std::string& path) {
  auto shape = read_lora_shape(path);
  if (denoiser_family(preset) == "h3" && h3_lora_is_split(read_lora(path))) shape.rank *= 3, shape.alpha *= 3;
  return shape;
}

}  // namespace vdt
