// Batch -> model inputs, the one place every call site builds them (the SFT step, SFT validation, both samplers, the
// causal window loss, the step bench): tensors moved to the model's device (latents and text in its compute dtype),
// semantic ids passed only when the model has the adapter, a causal window's family conditioning. Plus the start-up
// checks and fitting of a data root to a model.
#pragma once
#include <map>
#include <string>

#include "model/denoiser.h"

namespace vdt {

class CausalDataset;

// x [B, C, F, H, W] noisy latents, t timesteps (0..1000), context rows [R, Lt, text_dim] with context_ids [B, F'] (or
// context [B, Lt, text_dim] and no ids), sem_ids [B, F, Hs, Ws] (ignored when the model has no adapter).
DenoiserInputs model_inputs(const Denoiser& model, const torch::Tensor& x, const torch::Tensor& t,
                            const torch::Tensor& context, const torch::Tensor& context_ids,
                            const torch::Tensor& sem_ids = {}, AttentionPattern attention = {});

// A causal window's family conditioning into in.extra: the token tags of the window's first prompt row
// ("text_tags" [1, Lt]: H3's vision tokens inside the text; tags [R, Lt] and context_ids [1, span] from
// CausalDataset::text_of, undefined tags: none) and each clean conditioning latent (H3's Picture 1, cond[name]
// [C, 1, H, W]) as "<name>" [1, C, 1, H, W] with its noise cond_noise[name] as "<name>.noise".
void add_window_conditioning(DenoiserInputs& in, const torch::Tensor& tags, const torch::Tensor& context_ids,
                             const std::map<std::string, torch::Tensor>& cond,
                             const std::map<std::string, torch::Tensor>& cond_noise);

// Fits the side streams a causal root carries (H3's silent audio) to the base's clock for spans of `span_frames` in
// chunks of `chunk_frames` (CausalDataset::set_stream_steps); streams the base does not denoise are left alone.
void fit_side_streams(const Denoiser& model, CausalDataset& ds, int64_t span_frames, int64_t chunk_frames);

// Throws naming `where` (the dataset.json) and `flag` (the model flag) when the data's latent channels or text width
// differ from the model's.
void check_data_matches(const Denoiser& model, int64_t latent_channels, int64_t text_dim, const std::string& where,
                        const std::string& flag);

}  // namespace vdt
