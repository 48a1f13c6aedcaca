// Batch -> model inputs, the one place every call site builds them (the SFT step, SFT validation, both samplers, the
// causal window loss, the step bench): tensors moved to the model's device (latents and text in its compute dtype),
// semantic ids passed only when the model has the adapter. Plus the start-up check that a data root fits a model.
#pragma once
#include <string>

#include "model/denoiser.h"

namespace vdt {

// x [B, C, F, H, W] noisy latents, t timesteps (0..1000), context rows [R, Lt, text_dim] with context_ids [B, F'] (or
// context [B, Lt, text_dim] and no ids), sem_ids [B, F, Hs, Ws] (ignored when the model has no adapter).
DenoiserInputs model_inputs(const Denoiser& model, const torch::Tensor& x, const torch::Tensor& t,
                            const torch::Tensor& context, const torch::Tensor& context_ids,
                            const torch::Tensor& sem_ids = {}, AttentionPattern attention = {});

// Throws naming `where` (the dataset.json) and `flag` (the model flag) when the data's latent channels or text width
// differ from the model's.
void check_data_matches(const Denoiser& model, int64_t latent_channels, int64_t text_dim, const std::string& where,
                        const std::string& flag);

}  // namespace vdt
