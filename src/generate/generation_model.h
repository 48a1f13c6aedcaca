// The model a stream is generated with: a base built from its weights (or a random base, for tests and benchmarks) and
// a LoRA file attached and loaded, the base named by the file's metadata (generate/lora_file.h). The causal trainer
// builds its frozen base here too, so a sampled LoRA runs on the base it was trained on. Not here: speed switches
// applied to a built model (--merge-lora, --fp8: tools/stream_speed.h), sharding.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>

#include "generate/lora_file.h"
#include "model/denoiser.h"

namespace vdt {

// The preset `model` with `weights` (a file or a directory of shards; errors name --weights), or without them a random
// base from `seed` (Wan's init with a non-zero head, so gradients reach a LoRA). No LoRA attached.
std::shared_ptr<Denoiser> build_base(const std::string& model, const std::string& weights, uint64_t seed,
                                     const torch::Device& device, torch::ScalarType dtype);

struct GenerationModel {
  std::shared_ptr<Denoiser> model;  // the base with the LoRA attached
  LoraFileMeta meta;                // the LoRA file's (chunk frames, span, run seed, a student's schedule)
  std::string lora;                 // the file
};

// The LoRA file `lora`'s base (`weights` when not empty, else the file's metadata 'weights'; none: a random base from
// the run's seed) on `device` in `dtype`, the LoRA attached and loaded (its naming fitted to the base: H3's split or
// fused attention). Errors name the file and the key or --weights.
GenerationModel load_generation_model(const std::string& lora, const std::string& weights, const torch::Device& device,
                                      torch::ScalarType dtype);

// eval() while sampling, the caller's mode back afterwards (a trainer's previews sample between training steps).
class EvalScope {
 public:
  explicit EvalScope(Denoiser& m) : model_(m), was_training_(m.is_training()) { model_.eval(); }
  ~EvalScope() {
    if (was_training_) model_.train();
  }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  Denoiser& model_;
  const bool was_training_;
};

}  // namespace vdt
