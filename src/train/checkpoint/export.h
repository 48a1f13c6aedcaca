// Checkpoint export of the SFT (docs/design.md §4): `step-N.safetensors` in bf16 with the model's keys (825 Wan keys +
// 6 gc_sem_cond keys for TI2V-5B, no prefix) and metadata (vocab, res, step, hyper-parameters, lineage), written
// atomically (temp + fsync + rename, mode 644) and then re-opened and checked. Also the reader side: building the
// model a checkpoint describes. Not here: optimizer state (state slots).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/denoiser.h"
#include "model/sem_cond.h"

namespace vdt {

// Writes and verifies; throws naming the file and what the check found.
void export_checkpoint(const torch::nn::Module& model, const std::string& path, const Metadata& metadata);

// A model for a checkpoint (one or several files), built through the base-model seam (denoiser_for_weights: the
// family and architecture from the weights), gc_sem_cond installed when its keys are present (vocab, sem_scale from
// metadata), weights loaded strictly.
std::shared_ptr<Denoiser> load_checkpoint_model(const std::vector<std::string>& files, torch::Device device,
                                                torch::ScalarType dtype);

// SemCondConfig recorded in metadata and weights of a checkpoint (throws naming the file when incomplete).
SemCondConfig sem_cond_config_of(const SafetensorsSet& files);

}  // namespace vdt
