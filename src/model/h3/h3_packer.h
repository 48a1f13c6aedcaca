// The packed H3 sequence as DiffSynth's MiniMaxH3Unit_PackedSequenceBuilder and model_fn_minimax_h3 build it
// (docs/h3_model.md §1.5–1.7, §2): T2VA [text | audio ch0, ch1 | video | pad], FL2VA [text | keyframe rows | audio |
// video | pad], Ref2VA [text | ref blocks | audio | video | pad]; rows rounded up to a multiple of 64, padding its own
// attention segment. Two steps: the layout (positions, tags, row indices: geometry only) and the packing of content
// and per-row timesteps into H3Inputs. Also patchify/unpatchify and audio pack/unpack.
// Not here: encoding keyframes or references (the caller gives their rows), the DiT, losses.
#pragma once
#include <torch/types.h>

#include <optional>
#include <vector>

#include "model/h3/h3_dit.h"

namespace vdt {

// The first pixel frame of latent k of a stream: clips of 17 frames -> 5 latents covering 1, 4, 4, 4, 4 frames.
int64_t h3_first_pixel_frame(int64_t k);
// Video latent [1, C, T, H, W] -> rows [T*(H/2)*(W/2), C*4]: rows (t, h/2, w/2) frame-major, features c*4+ph*2+pw.
torch::Tensor h3_patchify_video(const torch::Tensor& latent);
// rows [T*(H/2)*(W/2), C*4] -> [1, C, T, H, W] (the inverse of h3_patchify_video).
torch::Tensor h3_unpatchify_video(const torch::Tensor& rows, int64_t T, int64_t H, int64_t W);
// Audio latent [Ch, Da, A] -> rows [Ch*A, Da], channel-major.
torch::Tensor h3_pack_audio(const torch::Tensor& latent);
// rows [Ch*A, Da] -> [Ch, Da, A].
torch::Tensor h3_unpack_audio(const torch::Tensor& rows, int64_t channels, int64_t steps);
// Model time 1 − t/1000 of each timestep of t (0..1000 scale, any shape, flattened), each from its float32 value as
// the reference computes it.
std::vector<double> h3_model_times(const torch::Tensor& t);
// Conditioning rows of a keyframe/reference: ts*clean + (1-ts)*noise with ts a float32 scalar (noise_aug 0.999 in
// the reference, fresh CPU randn from the seed; 1.0 returns the clean rows). clean/noise [R, Dv] -> [R, Dv]
torch::Tensor h3_cond_rows(const torch::Tensor& clean, const torch::Tensor& noise, double noise_aug);

enum class H3RefKind { image, video, audio };
struct H3RefSpec {  // one Ref2VA reference block
  H3RefKind kind = H3RefKind::image;
  int64_t latent_t = 1, latent_h = 0, latent_w = 0;  // image (latent_t 1) or video latent grid
  int64_t audio_t = 0;  // audio: latent steps; video: its soundtrack's steps, packed before its frames (0 = silent)
};

struct H3LayoutSpec {
  int64_t text_len = 0;                              // Lt
  int64_t latent_t = 0, latent_h = 0, latent_w = 0;  // target video latent T, H, W (H, W even)
  int64_t audio_t = 0;                               // target audio latent steps A
  int64_t audio_channels = 2;                        // stereo: one row per (channel, step)
  std::vector<int64_t> keyframes;                    // FL2VA: 0 (first) / -1 (last), in row order
  std::vector<H3RefSpec> references;                 // Ref2VA, in request order (not with keyframes)
  int64_t seq_align = 64;
  void validate() const;  // throws naming the field, value and fix
};

struct H3Layout {
  H3LayoutSpec spec;
  int64_t seq_len = 0, used = 0;               // S (multiple of seq_align) and real rows
  int64_t cond_rows = 0;                       // leading img_pos rows that are keyframe/reference visual rows
  int64_t ref_audio_rows = 0;                  // leading audio_pos rows that are reference audio
  torch::Tensor position_ids;                  // [S, 3] float64 (t, h, w)
  torch::Tensor token_tags;                    // [S] int64: text 1, keyframe/reference/video 0, audio 2, padding -1
  torch::Tensor img_pos, audio_pos, text_pos;  // int64 row indices (conditioning first)
  torch::Tensor cu_seqlens;                    // [3] int32 {0, used, S}
  torch::Tensor refiner_cu_seqlens;            // [3] int32 {0, Lt, Lt}
  int64_t frame_rows() const { return (spec.latent_h / 2) * (spec.latent_w / 2); }
};
H3Layout build_h3_layout(const H3LayoutSpec& spec);

// Model time t in [0, 1] (1 = clean; DiffSynth's t = 1 - timestep/1000) for each kind of row, in float64; each
// row's value is rounded to float32 once, as the reference's float32 timestep vector.
struct H3Times {
  std::vector<double> video;     // target video: one value, or one per latent frame (diffusion forcing)
  std::vector<double> audio;     // target audio: one value, or one per latent step
  std::optional<double> text;    // text and padding rows ("the target t"); default: the single video value
  double cond_floor = 0.999;     // keyframe/reference visual rows: max(text t, cond_floor)
  double ref_audio_floor = 1.0;  // reference audio rows: max(audio t (text t if per step), floor)
};

struct H3Content {
  torch::Tensor video_latents;   // [1, C, T, H, W] target video (noised)
  torch::Tensor audio_latents;   // [Ch, Da, A] target audio (noised)
  torch::Tensor prompt_embeds;   // [Lt, text_dim]
  torch::Tensor text_tags;       // optional [Lt] int64: 1 text, 0 vision tokens inside the prompt; default all 1
  torch::Tensor cond_rows;       // [cond_rows, Dv] keyframe / reference visual rows in layout order
  torch::Tensor ref_audio_rows;  // [ref_audio_rows, Da] reference audio rows in layout order
};

struct H3Packed {
  H3Inputs inputs;                  // what H3DiT::forward takes
  torch::Tensor timesteps;          // [S] float32 per-row model time = unique_timesteps[inverse_indices]
  torch::Tensor update_mask;        // [Nv] bool: img_pos rows that are target video
  torch::Tensor audio_update_mask;  // [Na] bool: audio_pos rows that are target audio
};
H3Packed pack_h3(const H3Layout& layout, const H3Content& content, const H3Times& times);

// What model_fn_minimax_h3 returns: the negated head outputs of the target rows, unpacked.
struct H3Prediction {
  torch::Tensor video;  // [1, C, T, H, W]
  torch::Tensor audio;  // [Ch, Da, A]
};
H3Prediction h3_prediction(const H3Layout& layout, const H3Outputs& out);

}  // namespace vdt
