// What an H3 data root (dataset.json "model_family": "h3", docs/data_format.md) adds to the Wan layout: per clip the
// Picture 1 latent beside the video stream (latents/<clip>.safetensors "picture1" [C, 1, Hp, Wp] at native
// resolution, "picture1_2048" at 2048 pixels on the short edge when present, as DiffSynth's ref_image_short_edge)
// and one shared silent audio latent
// (audio_silence.safetensors "silence": a [Da] row or a [2, Da, A0] stream), fitted to a window's audio steps.
// Not here: the video stream itself (clip_io.h), chunking or noise.
#pragma once
#include <torch/types.h>

#include <string>

#include "data/data_root.h"

namespace vdt {

// The latent key of a --picture1 choice: native -> "picture1", 2048 -> "picture1_2048"; anything else throws.
std::string picture1_key(const std::string& choice);
// <root>/audio_silence.safetensors
std::string silence_path(const std::string& root);

// The H3 video VAE's spatial factor: a latent of H x W rows is 16 H x 16 W pixels.
inline constexpr int64_t kH3VaeSpatial = 16;
// {H, W} in pixels of an h x w pixel image resized so its short edge is `short_edge`: scale = short_edge / min(h, w),
// each side the nearest multiple of 32 (at least 32; ties to even) of side * scale, as DiffSynth's H3 pipeline sizes a
// reference image (docs/h3_model.md §2, "Ref2VA"): 1080 x 1920 -> 2048 x 3648.
std::pair<int64_t, int64_t> short_edge_pixels(int64_t h, int64_t w, int64_t short_edge);
// The latent {Hp, Wp} of a Picture 1 of native latent size h x w resized so its short edge is `short_edge` pixels,
// each side the nearest multiple of 32 pixels (at least 32; ties to even, as Python's round in DiffSynth's
// _nearest_multiple).
std::pair<int64_t, int64_t> picture1_short_edge_size(int64_t h, int64_t w, int64_t short_edge);

// Header-only check of a clip's Picture 1: key present, C == latent_channels, one frame, even H, W; for
// "picture1_2048" also the size dataset.json's picture1_short_edge gives from the source image's size (the file's
// picture1_source_size metadata, WxH) or, without it, from the native latent. Returns {Hp, Wp}.
std::pair<int64_t, int64_t> check_picture1_header(const std::string& path, const DatasetInfo& info,
                                                  const std::string& key);
// The Picture 1 latent [C, 1, Hp, Wp] bf16, checked (finite).
torch::Tensor read_picture1(const std::string& path, const DatasetInfo& info, const std::string& key);

// The silent stream [2, Da, steps] bf16: a [Da] row repeated, or a [2, Da, A0] stream's first `steps` steps (its last
// step repeated past A0). Checked: Da == audio_channels, finite.
torch::Tensor read_silence(const std::string& path, const DatasetInfo& info, int64_t steps);

}  // namespace vdt
