// The causal trainer's stream preview (`--val-sample-every N`): val window 0 streamed with the KV cache
// (generate/window.h) over the trained span, and on a root with a preview VAE (vae.safetensors, the
// synthetic roots) the frame grid ground truth above stream for TensorBoard. Not here: when it runs (the trainer).
#pragma once
#include <string>

#include "data/causal_dataset.h"
#include "model/denoiser.h"

namespace vdt {

struct StreamPreview {
  std::string tag;               // "stream/<clip>@<start>"
  torch::Tensor grid;            // [3, H, W] frame_grid, or undefined without a preview VAE
  double seconds_per_chunk = 0;  // mean over the chunks (Euler steps and commit)
};

StreamPreview stream_preview(Denoiser& model, const CausalDataset& ds, const std::string& data_root,
                             int64_t chunk_frames, int64_t steps, uint64_t seed, bool clean_first_frame);

}  // namespace vdt
