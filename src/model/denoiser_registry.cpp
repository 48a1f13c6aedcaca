#include "model/denoiser_registry.h"

#include "core/error.h"
#include "model/config.h"
#include "model/wan_dit.h"

namespace vdt {

std::vector<std::string> denoiser_presets() { return preset_names(); }

std::string denoiser_family(const std::string& preset) {
  for (const auto& p : preset_names())
    if (p == preset) return "wan";
  std::string known;
  for (const auto& p : denoiser_presets()) known += (known.empty() ? "" : ", ") + p;
  VDT_FAIL("unknown model preset '", preset, "' (known: ", known, ")");
}

double denoiser_train_flops(const std::string& preset, int64_t tokens, int64_t text_len, int64_t batch) {
  const std::string family = denoiser_family(preset);
  if (family == "wan") return wan_train_flops(preset_config(preset), tokens, text_len, batch);
  VDT_FAIL("model family '", family, "' of preset '", preset, "' has no FLOP count");
}

std::shared_ptr<Denoiser> make_denoiser(const std::string& preset, torch::TensorOptions options, int64_t layers) {
  const std::string family = denoiser_family(preset);
  if (family == "wan") {
    ModelConfig mc = preset_config(preset);
    if (layers > 0) mc.num_layers = layers;
    return WanDiT(mc, options).ptr();
  }
  VDT_FAIL("model family '", family, "' of preset '", preset, "' has no constructor");
}

}  // namespace vdt
