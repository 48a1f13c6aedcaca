// The block-causal H3 sequence of the causal workflow (docs/h3_model.md §4): a span of latent frames cut into chunks of
// `chunk_frames` latents, each chunk owning the audio steps whose rotary start time falls inside it (integer
// arithmetic, §4.1), rows stored as [P = text | Picture 1 | chunk 0 (audio ch0, audio ch1, video) | chunk 1 | ... |
// pad] (§4.2: the model is order-invariant, positions, tags and timesteps travel with their rows). Chunk c sees P and
// chunks <= c, P sees P, padding sees itself. Teacher forcing (§4.3): [P | clean chunks | noisy chunks | pad], a
// chunk's clean and noisy copies at the same RoPE coordinates; clean chunk c sees P and clean chunks <= c, noisy
// chunk c sees P, clean chunks < c and itself.
// Not here: noise levels or losses (diffusion/forcing.h), the packing itself (h3_packer.h).
#pragma once
#include <vector>

#include "model/h3/h3_packer.h"

namespace vdt {

// Audio steps (40 Hz) of a span of `frames` latents: the round-up of its rotary length (5/3)·first_pixel_frame(frames).
int64_t h3_span_audio_steps(int64_t frames);
// The first audio step of each chunk of `chunk_frames` latents and the span's audio steps (chunks + 1 values from 0):
// chunk c owns steps j with 3j >= 5·first_pixel_frame(c·chunk_frames), i.e. 0, 29, 57, 85, ... for 1-clip chunks.
std::vector<int64_t> h3_audio_chunk_bounds(int64_t frames, int64_t chunk_frames);

// `noisy` packed from `layout` (pack_h3) reordered into chunks, with the block-causal attention set; with `clean`
// (the same layout packed with the clean content) the teacher-forcing sequence. The result's out_pos are the target
// video rows frame by frame ([clean frames | noisy frames] under teacher forcing) and its audio_pos start with the
// target audio rows, per channel [clean steps | noisy steps], so h3_unpatchify_video / h3_unpack_audio read them as
// 2T frames / 2A steps. The layout may hold references (Picture 1) but no reference audio or keyframes.
H3Inputs h3_block_causal(const H3Layout& layout, const H3Packed& noisy, const H3Packed* clean, int64_t chunk_frames);

}  // namespace vdt
