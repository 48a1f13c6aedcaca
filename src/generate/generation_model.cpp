// build_base and load_generation_model: the registry builds the preset, weights_io loads it, model/lora attaches.
#include "generate/generation_model.h"

#include <torch/torch.h>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/denoiser_registry.h"
#include "model/lora.h"
#include "model/weights_io.h"

namespace vdt {

std::shared_ptr<Denoiser> build_base(const std::string& model, const std::string& weights, uint64_t seed,
                                     const torch::Device& device, torch::ScalarType dtype) {
  auto m = make_denoiser(model, torch::TensorOptions().device(device).dtype(dtype));
  if (weights.empty()) {  // a random base for tests and benchmarks
    m->init_random_base(seed);
    return m;
  }
  m->init_weights(seed);
  auto set = SafetensorsSet::open(weight_files(weights, "--weights"));
  VDT_CHECK(!set.contains("gc_sem_cond.patch.weight"), "--weights ", weights,
            " holds the gc_sem_cond adapter; causal LoRAs train on a plain base (no semantic-map input yet). Give "
            "the base weights.");
  load_weights(*m, set);
  return m;
}

GenerationModel load_generation_model(const std::string& lora, const std::string& weights, const torch::Device& device,
                                      torch::ScalarType dtype) {
  GenerationModel g;
  g.lora = lora;
  g.meta = read_lora_meta(lora);
  const auto file_lora = read_lora(lora);
  g.model = build_base(g.meta.model, !weights.empty() ? weights : g.meta.weights, g.meta.seed, device, dtype);
  const auto fitted = lora_for_model(*g.model, file_lora, lora);
  LoraConfig lc;
  lc.rank = fitted.rank, lc.alpha = fitted.alpha;
  lc.targets = g.meta.targets.empty() ? g.model->lora_targets() : g.meta.targets;
  attach_lora(*g.model, lc, 0);
  load_lora(*g.model, fitted, lora);
  return g;
}

}  // namespace vdt
