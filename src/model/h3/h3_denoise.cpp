// H3DiT through the base-model seam: per sample, the layout (text, Picture 1 as a Ref2VA image reference, the audio
// side stream, the target video), the packing with model time 1 − t/1000 per row, the chunked block-causal sequence
// when the pattern asks for it, the packed forward, and the negated head outputs unpacked (the prediction of
// noise − x0, the flow-matching target of every vdt trainer).
#include <torch/torch.h>

#include <optional>

#include "core/error.h"
#include "model/h3/h3_causal.h"
#include "model/h3/h3_dit.h"

namespace vdt {
namespace {

const torch::Tensor* find(const DenoiserInputs& in, const std::string& key) {
  auto it = in.extra.find(key);
  return it == in.extra.end() ? nullptr : &it->second;
}

}  // namespace

torch::Tensor H3DiTImpl::forward(const DenoiserInputs& in, DenoiserAux* aux) {
  const auto& c = cfg_;
  for (const auto& [key, value] : in.extra)
    VDT_CHECK(key == "text_tags" || key == "picture1" || key == "picture1.noise" || key == "audio" || key == "audio.t",
              "H3DiT: unknown input '", key, "' (known: text_tags, picture1, picture1.noise, audio, audio.t)");
  VDT_CHECK(in.x.dim() == 5 && in.x.size(1) == c.latent_channels && in.x.size(3) % 2 == 0 && in.x.size(4) % 2 == 0,
            "H3DiT: expected x [B, ", c.latent_channels, ", F, H, W] with even H, W, got ", in.x.sizes());
  const int64_t B = in.x.size(0), F_all = in.x.size(2), H = in.x.size(3), W = in.x.size(4);
  const auto& pattern = in.attention;
  const bool tf = pattern.teacher_forcing;
  VDT_CHECK(!tf || (pattern.causal() && F_all % 2 == 0),
            "H3DiT: teacher forcing needs a chunk size and [clean | "
            "noisy] halves, got ",
            F_all, " frames");
  const int64_t F = tf ? F_all / 2 : F_all;
  VDT_CHECK(in.t.dim() == 1 || (in.t.dim() == 2 && in.t.size(1) == F_all), "H3DiT: expected t [B] or [B, F=", F_all,
            "], got ", in.t.sizes());
  const auto* tags = find(in, "text_tags");
  const auto* pic = find(in, "picture1");
  const auto* pic_noise = find(in, "picture1.noise");
  const auto* audio = find(in, "audio");
  const auto* audio_t = find(in, "audio.t");
  VDT_CHECK(!audio || (audio->dim() == 4 && audio->size(0) == B && audio->size(2) == c.audio_channels && audio_t &&
                       audio_t->dim() == 2 && audio_t->size(1) == audio->size(3)),
            "H3DiT: expected audio [B, 2, ", c.audio_channels, ", A] with audio.t [B, A], got ",
            audio ? audio->sizes() : at::IntArrayRef{}, audio_t ? " and " : " and no audio.t",
            audio_t ? audio_t->sizes() : at::IntArrayRef{});
  VDT_CHECK(!pic || (pic->dim() == 5 && pic->size(0) == B && pic->size(1) == c.latent_channels && pic->size(2) == 1),
            "H3DiT: expected picture1 [B, ", c.latent_channels, ", 1, Hp, Wp], got ",
            pic ? pic->sizes() : at::IntArrayRef{});
  const int64_t A_all = audio ? audio->size(3) : 0, A = tf ? A_all / 2 : A_all;

  std::vector<torch::Tensor> videos, audios;
  for (int64_t b = 0; b < B; ++b) {
    // Text: one prompt per sample.
    torch::Tensor prompt;
    if (in.context_ids.defined()) {
      auto ids = in.context_ids[b].to(torch::kCPU, torch::kLong);
      VDT_CHECK(ids.eq(ids[0]).all().item<bool>(), "H3DiT: the H3 base takes one prompt per sample; sample ", b,
                " has per-frame prompts ", ids);
      prompt = in.context[ids[0].item<int64_t>()];
    } else {
      VDT_CHECK(in.context.dim() == 3 && in.context.size(0) == B, "H3DiT: expected context [B, Lt, ", c.text_dim,
                "], got ", in.context.sizes());
      prompt = in.context[b];
    }
    H3LayoutSpec spec;
    spec.text_len = prompt.size(0), spec.latent_t = F, spec.latent_h = H, spec.latent_w = W, spec.audio_t = A;
    spec.audio_channels = audio ? audio->size(1) : 2;
    if (pic) spec.references.push_back({H3RefKind::image, 1, pic->size(3), pic->size(4), 0});
    const auto layout = build_h3_layout(spec);

    const auto t_all = h3_model_times(in.t.dim() == 1 ? in.t[b].expand({F_all}) : in.t[b]);
    const auto ta_all = audio ? h3_model_times((*audio_t)[b]) : std::vector<double>{};
    auto half = [&](const std::vector<double>& v, int64_t n, bool second) {
      return std::vector<double>(v.begin() + (second ? n : 0), v.begin() + (second ? 2 * n : n));
    };
    H3Content content;
    content.prompt_embeds = prompt;
    if (tags) content.text_tags = (*tags)[b];
    if (pic) {
      auto clean = h3_patchify_video((*pic)[b].unsqueeze(0).to(torch::kFloat32));  // [1, C, 1, Hp, Wp] -> [R, Dv]
      auto noise =
          pic_noise ? h3_patchify_video((*pic_noise)[b].unsqueeze(0).to(torch::kFloat32)) : torch::zeros_like(clean);
      content.cond_rows = h3_cond_rows(clean, noise, 0.999);
    }
    auto pack = [&](bool second) {  // the target half (noisy, or the clean copy under teacher forcing)
      H3Content ct = content;
      ct.video_latents = in.x[b].narrow(1, second ? F : 0, F).unsqueeze(0);  // [C, F, H, W] -> [1, C, F, H, W]
      ct.audio_latents =
          audio ? (*audio)[b].narrow(2, second ? A : 0, A) : torch::zeros({2, c.audio_channels, 0}, in.x.options());
      H3Times times;
      times.video = tf ? half(t_all, F, second) : t_all;
      times.audio = A > 0 ? (tf ? half(ta_all, A, second) : ta_all) : std::vector<double>{1.0};
      // Bidirectional: text at the target's time (frame 0's). Block-causal: the prefix at the conditioning level.
      times.text = pattern.causal() ? 0.999 : times.video[0];
      return pack_h3(layout, ct, times);
    };
    const auto noisy = pack(tf);
    H3Inputs packed;
    if (pattern.causal()) {
      const auto clean = tf ? std::optional<H3Packed>(pack(false)) : std::nullopt;
      packed = h3_block_causal(layout, noisy, clean ? &*clean : nullptr, pattern.chunk_frames);
    } else {
      packed = noisy.inputs;
      packed.out_pos =
          layout.img_pos.narrow(0, layout.cond_rows, layout.img_pos.size(0) - layout.cond_rows).to(in.x.device());
    }
    const auto out = forward(packed);
    // The raw heads approximate x0 − ε: negate for the prediction of noise − x0.
    videos.push_back(-h3_unpatchify_video(out.video_logits, F_all, H, W));  // [1, C, F_all, H, W]
    if (audio)
      audios.push_back(
          -h3_unpack_audio(out.audio_logits.narrow(0, 0, spec.audio_channels * A_all), spec.audio_channels, A_all)
               .unsqueeze(0));  // [1, Ch, Da, A_all]
  }
  if (aux && audio) aux->streams["audio"] = torch::cat(audios, 0);
  return torch::cat(videos, 0);
}

}  // namespace vdt
