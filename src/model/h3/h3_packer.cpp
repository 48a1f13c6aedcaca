// Packed-sequence builder, after DiffSynth's _build_packed_t2va / _fl2va / _ref2va and model_fn_minimax_h3.
// Rotary times are kept in integer thirds of a unit (1 unit = 1/40 s = one audio latent; a pixel frame at 24 fps
// is 5/3 units) so video times are origin + 5·f(k)/3 with f(k) the first pixel frame of latent k, computed once in
// float64 instead of the reference's running float sum (which drifts by an ulp from the 6th latent on; the float32
// cast the DiT applies removes that difference). The spatial grid repeats np.linspace's float64 steps exactly.
#include "model/h3/h3_packer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace vdt {
namespace {

constexpr double kInterp = 32.0;  // a square canvas spans [0, 32) on each spatial axis

// First pixel frame covered by latent k: frames per latent (1, 4, 4, 4, 4) per 17-frame VAE clip.

// origin + offset, both given in thirds of a rotary unit.
double at_thirds(int64_t origin3, int64_t offset3) {
  return static_cast<double>(origin3) / 3.0 + static_cast<double>(offset3) / 3.0;
}

// 32 * np.linspace(left, left + dim/s, dim/2, endpoint=False) with s = sqrt(area), left = (1 - dim/s) / 2: numpy
// forms i*step, then adds left (two roundings: the volatile keeps a compiler from fusing them into one FMA).
std::vector<double> axis_grid(int64_t dim, double sqrt_area) {
  const double ratio = static_cast<double>(dim) / sqrt_area;
  const double left = (1.0 - ratio) * 0.5, right = left + ratio;
  const int64_t n = dim / 2;
  const double step = (right - left) / static_cast<double>(n);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    volatile double y = static_cast<double>(i) * step;
    out[i] = (y + left) * kInterp;
  }
  return out;
}

struct Grid {
  std::vector<double> h, w;
};
Grid spatial_grid(int64_t latent_h, int64_t latent_w) {
  const double s = std::sqrt(static_cast<double>(latent_h * latent_w));
  return {axis_grid(latent_h, s), axis_grid(latent_w, s)};
}

// Rows written in order; every writer appends at `row`.
struct RowWriter {
  std::vector<double> pos;  // [S * 3]
  std::vector<int64_t> tags, img, audio;
  int64_t row = 0;
  void frame(double t, const Grid& g) {  // one latent frame: (h/2, w/2) row-major, tag 0
    for (double h : g.h)
      for (double w : g.w) put(t, h, w, 0), img.push_back(row++);
  }
  // Audio latent j at origin + j; channel 0 sits at the left video column, the others at the right one.
  void audio_rows(int64_t origin3, int64_t steps, int64_t channels, const Grid& g) {
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t j = 0; j < steps; ++j)
        put(at_thirds(origin3, 3 * j), 0.0, c == 0 ? g.w.front() : g.w.back(), 2), audio.push_back(row++);
  }
  void put(double t, double h, double w, int64_t tag) {
    pos[row * 3] = t, pos[row * 3 + 1] = h, pos[row * 3 + 2] = w;
    tags[row] = tag;
  }
};

torch::Tensor i64(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).reshape({-1}); }

}  // namespace

int64_t h3_first_pixel_frame(int64_t k) {
  const int64_t c = k / 5, m = k % 5;
  return 17 * c + (m == 0 ? 0 : 4 * m - 3);
}

torch::Tensor h3_patchify_video(const torch::Tensor& latent) {
  TORCH_CHECK(latent.dim() == 5 && latent.size(0) == 1 && latent.size(3) % 2 == 0 && latent.size(4) % 2 == 0,
              "h3_patchify_video: expected [1, C, T, H, W] with even H and W, got ", latent.sizes());
  const int64_t C = latent.size(1), T = latent.size(2), h = latent.size(3) / 2, w = latent.size(4) / 2;
  auto p = latent.reshape({1, C, T, 1, h, 2, w, 2});  // [1, C, T, H, W] -> [n, c, t, r, h, p, w, q]
  return p.permute({0, 2, 4, 6, 1, 3, 5, 7}).reshape({T * h * w, C * 4}).contiguous();  // -> [T*h*w, C*4]
}

torch::Tensor h3_unpatchify_video(const torch::Tensor& rows, int64_t T, int64_t H, int64_t W) {
  TORCH_CHECK(rows.dim() == 2 && rows.size(1) % 4 == 0 && rows.size(0) == T * (H / 2) * (W / 2),
              "h3_unpatchify_video:", " expected rows [", T * (H / 2) * (W / 2), ", C*4] for T ", T, ", H ", H, ", W ",
              W, ", got ", rows.sizes());
  const int64_t C = rows.size(1) / 4;
  auto p = rows.reshape({1, T, H / 2, W / 2, C, 1, 2, 2});                           // [n, t, h, w, c, r, p, q]
  return p.permute({0, 4, 1, 5, 2, 6, 3, 7}).reshape({1, C, T, H, W}).contiguous();  // -> [1, C, T, H, W]
}

torch::Tensor h3_pack_audio(const torch::Tensor& latent) {
  TORCH_CHECK(latent.dim() == 3, "h3_pack_audio: expected [Ch, Da, A], got ", latent.sizes());
  return latent.permute({0, 2, 1}).reshape({latent.size(0) * latent.size(2), latent.size(1)}).contiguous();
}

torch::Tensor h3_unpack_audio(const torch::Tensor& rows, int64_t channels, int64_t steps) {
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == channels * steps, "h3_unpack_audio: expected rows [", channels * steps,
              ", Da], got ", rows.sizes());
  return rows.reshape({channels, steps, rows.size(1)}).permute({0, 2, 1}).contiguous();  // -> [Ch, Da, A]
}

std::vector<double> h3_model_times(const torch::Tensor& t) {
  auto host = t.to(torch::kCPU, torch::kFloat32).contiguous().reshape({-1});
  const float* p = host.data_ptr<float>();
  std::vector<double> out;
  for (int64_t i = 0; i < host.numel(); ++i) out.push_back(1.0 - static_cast<double>(p[i]) / 1000.0);
  return out;
}

torch::Tensor h3_cond_rows(const torch::Tensor& clean, const torch::Tensor& noise, double noise_aug) {
  TORCH_CHECK(clean.sizes() == noise.sizes(), "h3_cond_rows: clean ", clean.sizes(), " and noise ", noise.sizes(),
              " differ");
  if (noise_aug == 1.0) return clean.to(torch::kFloat32);
  auto ts = torch::tensor(static_cast<float>(noise_aug), clean.options().dtype(torch::kFloat32));
  return ts * clean.to(torch::kFloat32) + (1.0 - ts) * noise.to(torch::kFloat32);
}

void H3LayoutSpec::validate() const {
  VDT_CHECK(text_len >= 0 && audio_t >= 0 && audio_channels >= 1, "h3 layout: text_len ", text_len, ", audio_t ",
            audio_t, " must be >= 0 and audio_channels ", audio_channels, " >= 1");
  VDT_CHECK(latent_t >= 1 && latent_h >= 2 && latent_w >= 2 && latent_h % 2 == 0 && latent_w % 2 == 0,
            "h3 layout: target latent T x H x W = ", latent_t, " x ", latent_h, " x ", latent_w,
            " needs T >= 1 and even H, W >= 2 (patch 1x2x2)");
  VDT_CHECK(seq_align >= 1, "h3 layout: seq_align ", seq_align, " must be positive");
  VDT_CHECK(keyframes.empty() || references.empty(), "h3 layout: keyframes (FL2VA) and references (Ref2VA) cannot ",
            "be combined");
  for (int64_t k : keyframes)
    VDT_CHECK(k == 0 || k == -1, "h3 layout: keyframe index ", k, " must be 0 (first) or -1 (last)");
  for (size_t i = 0; i < references.size(); ++i) {
    const auto& r = references[i];
    if (r.kind == H3RefKind::audio) {
      VDT_CHECK(r.audio_t >= 0, "h3 layout: reference ", i, " (audio) has audio_t ", r.audio_t);
      continue;
    }
    VDT_CHECK(r.latent_h >= 2 && r.latent_w >= 2 && r.latent_h % 2 == 0 && r.latent_w % 2 == 0 && r.latent_t >= 1 &&
                  r.audio_t >= 0,
              "h3 layout: reference ", i, " latent T x H x W = ", r.latent_t, " x ", r.latent_h, " x ", r.latent_w,
              " needs T >= 1 and even H, W >= 2");
    VDT_CHECK(r.kind != H3RefKind::image || (r.latent_t == 1 && r.audio_t == 0), "h3 layout: reference ", i,
              " is an image: latent_t must be 1 and audio_t 0");
  }
}

H3Layout build_h3_layout(const H3LayoutSpec& spec) {
  spec.validate();
  const int64_t L = spec.text_len, T = spec.latent_t, A = spec.audio_t, ch = spec.audio_channels;
  const int64_t frame_rows = (spec.latent_h / 2) * (spec.latent_w / 2);
  int64_t used = L + T * frame_rows + A * ch + static_cast<int64_t>(spec.keyframes.size()) * frame_rows;
  for (const auto& r : spec.references)
    used += (r.kind == H3RefKind::audio ? 0 : r.latent_t * (r.latent_h / 2) * (r.latent_w / 2)) + r.audio_t * ch;
  const int64_t S = (used + spec.seq_align - 1) / spec.seq_align * spec.seq_align;

  RowWriter out;
  out.pos.assign(S * 3, 0.0);
  out.tags.assign(S, -1);
  for (int64_t i = 0; i < L; ++i) out.put(static_cast<double>(i), 0.0, 0.0, 1), ++out.row;  // text (i, 0, 0)

  H3Layout lay;
  lay.spec = spec;
  const Grid target = spatial_grid(spec.latent_h, spec.latent_w);
  int64_t cursor3 = 3 * L;  // the media clock starts at t = L
  // FL2VA keyframes: the first at the target's first latent, the last at its last pixel frame, (5/3)·(F − 1).
  for (int64_t k : spec.keyframes)
    out.frame(at_thirds(cursor3, k == 0 ? 0 : 5 * (h3_first_pixel_frame(T) - 1)), target);
  // Ref2VA blocks, each on its own spatial grid: an image takes one unit; a video packs its soundtrack first and
  // takes the longer of the two spans; an audio reference (on the target's columns) takes its steps.
  int64_t ref_audio_rows = 0;
  for (const auto& r : spec.references) {
    if (r.kind == H3RefKind::audio) {
      out.audio_rows(cursor3, r.audio_t, ch, target);
      ref_audio_rows += r.audio_t * ch;
      cursor3 += 3 * r.audio_t;
      continue;
    }
    const Grid g = spatial_grid(r.latent_h, r.latent_w);
    if (r.kind == H3RefKind::image) {
      out.frame(at_thirds(cursor3, 0), g);
      cursor3 += 3;
    } else {
      out.audio_rows(cursor3, r.audio_t, ch, g);
      ref_audio_rows += r.audio_t * ch;
      for (int64_t k = 0; k < r.latent_t; ++k) out.frame(at_thirds(cursor3, 5 * h3_first_pixel_frame(k)), g);
      cursor3 += std::max(3 * r.audio_t, 5 * h3_first_pixel_frame(r.latent_t));
    }
  }
  lay.cond_rows = static_cast<int64_t>(out.img.size());
  lay.ref_audio_rows = ref_audio_rows;
  // Target audio, then target video, at the final cursor.
  out.audio_rows(cursor3, A, ch, target);
  for (int64_t k = 0; k < T; ++k) out.frame(at_thirds(cursor3, 5 * h3_first_pixel_frame(k)), target);
  TORCH_INTERNAL_ASSERT(out.row == used, "h3 layout: wrote ", out.row, " rows, expected ", used);

  lay.seq_len = S;
  lay.used = used;
  lay.position_ids = torch::tensor(out.pos, torch::kFloat64).view({S, 3});
  lay.token_tags = i64(out.tags);
  lay.img_pos = i64(out.img);
  lay.audio_pos = i64(out.audio);
  lay.text_pos = torch::arange(L, torch::kLong);
  lay.cu_seqlens = torch::tensor({0, static_cast<int>(used), static_cast<int>(S)}, torch::kInt32);
  lay.refiner_cu_seqlens = torch::tensor({0, static_cast<int>(L), static_cast<int>(L)}, torch::kInt32);
  return lay;
}

H3Packed pack_h3(const H3Layout& lay, const H3Content& c, const H3Times& times) {
  const auto& sp = lay.spec;
  const int64_t S = lay.seq_len, T = sp.latent_t, A = sp.audio_t, ch = sp.audio_channels;
  const int64_t Nv = lay.img_pos.size(0), Na = lay.audio_pos.size(0);
  TORCH_CHECK(c.video_latents.dim() == 5 && c.video_latents.size(0) == 1 && c.video_latents.size(2) == T &&
                  c.video_latents.size(3) == sp.latent_h && c.video_latents.size(4) == sp.latent_w,
              "pack_h3: expected video_latents [1, C, ", T, ", ", sp.latent_h, ", ", sp.latent_w, "], got ",
              c.video_latents.sizes());
  const int64_t Dv = c.video_latents.size(1) * 4;
  TORCH_CHECK(c.audio_latents.dim() == 3 && c.audio_latents.size(0) == ch && c.audio_latents.size(2) == A,
              "pack_h3: expected audio_latents [", ch, ", Da, ", A, "], got ", c.audio_latents.sizes());
  const int64_t Da = c.audio_latents.size(1);
  TORCH_CHECK(c.prompt_embeds.dim() == 2 && c.prompt_embeds.size(0) == sp.text_len, "pack_h3: expected ",
              "prompt_embeds [", sp.text_len, ", text_dim], got ", c.prompt_embeds.sizes());
  TORCH_CHECK(lay.cond_rows == 0 || (c.cond_rows.defined() && c.cond_rows.dim() == 2 &&
                                     c.cond_rows.size(0) == lay.cond_rows && c.cond_rows.size(1) == Dv),
              "pack_h3: the layout has ", lay.cond_rows, " keyframe/reference rows: expected cond_rows [",
              lay.cond_rows, ", ", Dv, "], got ", c.cond_rows.defined() ? c.cond_rows.sizes() : at::IntArrayRef{});
  TORCH_CHECK(
      lay.ref_audio_rows == 0 || (c.ref_audio_rows.defined() && c.ref_audio_rows.dim() == 2 &&
                                  c.ref_audio_rows.size(0) == lay.ref_audio_rows && c.ref_audio_rows.size(1) == Da),
      "pack_h3: the layout has ", lay.ref_audio_rows, " reference audio rows: expected ref_audio_rows [",
      lay.ref_audio_rows, ", ", Da, "]");
  TORCH_CHECK(times.video.size() == 1 || static_cast<int64_t>(times.video.size()) == T, "pack_h3: times.video must ",
              "hold 1 value or one per latent frame (", T, "), got ", times.video.size());
  TORCH_CHECK(times.audio.size() == 1 || static_cast<int64_t>(times.audio.size()) == A, "pack_h3: times.audio must ",
              "hold 1 value or one per audio latent step (", A, "), got ", times.audio.size());
  TORCH_CHECK(times.text || times.video.size() == 1, "pack_h3: with per-frame video times, times.text (the time of ",
              "text and padding rows) must be given");

  const auto dev = c.video_latents.device();
  auto f32 = torch::TensorOptions().device(dev).dtype(torch::kFloat32);
  const auto img_pos = lay.img_pos.to(dev), audio_pos = lay.audio_pos.to(dev);
  const int64_t cond = lay.cond_rows, ref_audio = lay.ref_audio_rows;

  // Content: target rows after the conditioning rows in img_pos / audio_pos order.
  auto x = torch::zeros({S, Dv}, f32);
  x.index_copy_(0, img_pos.narrow(0, cond, Nv - cond), h3_patchify_video(c.video_latents.to(torch::kFloat32)));
  if (cond > 0) x.index_copy_(0, img_pos.narrow(0, 0, cond), c.cond_rows.to(f32));
  auto audio_x = torch::zeros({S, Da}, f32);
  audio_x.index_copy_(0, audio_pos.narrow(0, ref_audio, Na - ref_audio),
                      h3_pack_audio(c.audio_latents.to(torch::kFloat32)));
  if (ref_audio > 0) audio_x.index_copy_(0, audio_pos.narrow(0, 0, ref_audio), c.ref_audio_rows.to(f32));

  auto tags = lay.token_tags.clone();
  if (c.text_tags.defined()) {
    TORCH_CHECK(c.text_tags.numel() == sp.text_len, "pack_h3: text_tags has ", c.text_tags.numel(), " entries for ",
                sp.text_len, " text rows");
    tags.index_copy_(0, lay.text_pos, c.text_tags.reshape({-1}).to(torch::kCPU, torch::kLong));
  }

  // Per-row model time (float64, rounded to float32 once per row as the reference's float32 vector).
  const double t_text = times.text ? *times.text : times.video[0];
  const double t_audio_base = times.audio.size() == 1 ? times.audio[0] : t_text;
  std::vector<float> ts(S, static_cast<float>(t_text));
  auto img = lay.img_pos.accessor<int64_t, 1>(), aud = lay.audio_pos.accessor<int64_t, 1>();
  const int64_t frame_rows = lay.frame_rows();
  for (int64_t r = 0; r < Nv - cond; ++r)
    ts[img[cond + r]] = static_cast<float>(times.video.size() == 1 ? times.video[0] : times.video[r / frame_rows]);
  for (int64_t r = 0; r < Na - ref_audio; ++r)
    ts[aud[ref_audio + r]] = static_cast<float>(times.audio.size() == 1 ? times.audio[0] : times.audio[r % A]);
  for (int64_t r = 0; r < cond; ++r) ts[img[r]] = static_cast<float>(std::max(t_text, times.cond_floor));
  for (int64_t r = 0; r < ref_audio; ++r)
    ts[aud[r]] = static_cast<float>(std::max(t_audio_base, times.ref_audio_floor));
  auto timesteps = torch::tensor(ts, torch::kFloat32);
  auto [unique, inverse, counts] = at::_unique2(timesteps, /*sorted=*/true, /*return_inverse=*/true);

  H3Packed p;
  auto& in = p.inputs;
  in.x = x.unsqueeze(0);                                    // [1, S, Dv]
  in.audio_x = audio_x.unsqueeze(0);                        // [1, S, Da]
  in.position_ids = lay.position_ids.unsqueeze(0).to(dev);  // [1, S, 3] float64
  in.token_tags = tags.to(dev);
  in.unique_timesteps = unique.to(dev);
  in.inverse_indices = inverse.reshape({-1}).to(dev, torch::kLong);
  in.prompt_embeds = c.prompt_embeds;
  in.img_pos = img_pos;
  in.audio_pos = audio_pos;
  in.text_pos = lay.text_pos.to(dev);
  in.cu_seqlens = lay.cu_seqlens.to(dev);
  in.refiner_cu_seqlens = lay.refiner_cu_seqlens.to(dev);
  p.timesteps = timesteps.to(dev);
  p.update_mask = torch::arange(Nv, torch::kLong).ge(cond).to(dev);
  p.audio_update_mask = torch::arange(Na, torch::kLong).ge(ref_audio).to(dev);
  return p;
}

H3Prediction h3_prediction(const H3Layout& lay, const H3Outputs& out) {
  const auto& sp = lay.spec;
  TORCH_CHECK(out.video_logits.dim() == 2 && out.video_logits.size(0) == lay.img_pos.size(0) &&
                  out.audio_logits.dim() == 2 && out.audio_logits.size(0) == lay.audio_pos.size(0),
              "h3_prediction: expected video_logits [", lay.img_pos.size(0), ", Dv] and audio_logits [",
              lay.audio_pos.size(0), ", Da], got ", out.video_logits.sizes(), " and ", out.audio_logits.sizes());
  auto v = out.video_logits.narrow(0, lay.cond_rows, out.video_logits.size(0) - lay.cond_rows).to(torch::kFloat32);
  auto a =
      out.audio_logits.narrow(0, lay.ref_audio_rows, out.audio_logits.size(0) - lay.ref_audio_rows).to(torch::kFloat32);
  // The raw output approximates x0 − ε; the reference returns its negation (the flow-matching target ε − x0).
  return {-h3_unpatchify_video(v, sp.latent_t, sp.latent_h, sp.latent_w),
          -h3_unpack_audio(a, sp.audio_channels, sp.audio_t)};
}

}  // namespace vdt
