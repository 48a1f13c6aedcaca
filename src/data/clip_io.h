// Readers for one clip's files, each validating against dataset.json: latents/ (safetensors "latents"), cond/
// (safetensors "ids" or numpy .npz key "ids") and meta/ (per-frame world->image affines). Every error reads
// "<file>: <problem>, expected <...>". Not here: dropout, vocab folding, batching.
#pragma once
#include <torch/types.h>

#include <array>
#include <string>
#include <vector>

#include "data/data_root.h"

namespace vdt {

// Latents [C, F, H, W] of a clip as stored, checked: key "latents", dtype bf16 (fp16 / fp32 accepted and converted),
// C == latent_channels, F >= latent_frames, H, W == latent_hw, all finite. Returns `frames` frames from `start`
// (frames 0 = all) as a contiguous bf16 CPU tensor that owns its memory.
torch::Tensor read_latents(const std::string& path, const DatasetInfo& info, int64_t frames = 0, int64_t start = 0);
// The number of latent frames F a clip's latent stream holds (header only; the causal workflow's streams may be
// longer than dataset.json's latent_frames).
int64_t latent_stream_frames(const std::string& path, const DatasetInfo& info);
// Header-only check of a latent .safetensors file (no data read): key, dtype, shape.
void check_latents_header(const std::string& path, const DatasetInfo& info);

// Semantic ids [F, Hs, Ws] uint8 of a clip (.safetensors key "ids" or .npz key "ids"), checked: F >= latent_frames,
// Hs = H*sem_scale, Ws = W*sem_scale, every value < num_parts or 255 (an error names the frame and the value).
// Returns the first `frames` frames (0 = all), contiguous, owning its memory. Values are the stored ones (no fold).
torch::Tensor read_ids(const std::string& path, const DatasetInfo& info, int64_t num_parts, int64_t frames = 0);
// Header-only check of a .safetensors cond file (.npz files are only checked by read_ids).
void check_ids_header(const std::string& path, const DatasetInfo& info);

// One frame's world->image map: (u, v) = (a x + b y + c, d x + e y + f), u = column / Ws, v = row / Hs.
using Affine2D = std::array<double, 6>;
inline constexpr Affine2D kIdentityAffine = {1, 0, 0, 0, 1, 0};
// meta/<clip>.json's per-frame affines (at least `frames` of them, each invertible); a missing file = identity.
std::vector<Affine2D> read_meta(const std::string& path, int64_t frames);

// One array of a numpy .npz (a zip of .npy files, stored or deflated), as a CPU tensor of the stored dtype.
torch::Tensor read_npz(const std::string& path, const std::string& key);

}  // namespace vdt
