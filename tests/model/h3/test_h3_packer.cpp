#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "core/safetensors.h"
#include "model/h3/h3_packer.h"
#include "test_util.h"
#include "tools/h3_parity.h"

namespace vdt {
namespace {

struct Fixture {
  SafetensorsSet files = SafetensorsSet::open({test::fixture("h3_tiny_a.safetensors")});
  torch::Tensor get(const std::string& k) const { return files.get("fixture." + k).clone(); }
};

void expect_same(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::equal(a.to(torch::kDouble), b.to(torch::kDouble))) << what << "\n" << a << "\n" << b;
}

std::vector<double> column(const H3Layout& lay, int64_t axis) {
  auto c = lay.position_ids.select(1, axis).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// The fixture's packed call, index for index, from the unpacked inputs (positions exact in float64). The geometry
// comes from the fixture's `packing` metadata; for h3_tiny_a it is _build_packed_fl2va(10, 3, 4, 6, 5, [0]).
TEST(H3Packer, ReproducesTheFixturesPackedSequence) {
  Fixture f;
  std::vector<std::string> notes;
  const auto spec = h3_fixture_layout(f.files.metadata(), notes);
  ASSERT_TRUE(spec) << notes.front();
  const auto lay = build_h3_layout(*spec);
  const auto packing = nlohmann::json::parse(f.files.metadata().at("packing"));
  EXPECT_EQ(lay.seq_len, packing.value("seq_len", int64_t{-1}));
  EXPECT_EQ(lay.used, packing.value("used", int64_t{-1}));
  H3Content c;
  c.video_latents = f.get("video_latents");
  c.audio_latents = f.get("audio_latents");
  c.prompt_embeds = f.get("prompt_embeds");
  c.text_tags = f.get("text_token_tags");
  if (lay.cond_rows > 0) c.cond_rows = f.get("keyframe_cond_anchor");
  H3Times t;
  t.video = {1.0 - f.get("timestep_video").item<double>() / 1000.0};  // model time t = 1 - timestep/1000
  t.audio = {1.0 - f.get("timestep_audio").item<double>() / 1000.0};
  const auto p = pack_h3(lay, c, t);
  const auto& in = p.inputs;
  expect_same(in.x, f.get("x"), "x");
  expect_same(in.audio_x, f.get("audio_x"), "audio_x");
  ASSERT_EQ(in.position_ids.scalar_type(), torch::kFloat64);
  expect_same(in.position_ids, f.get("img_position_ids"), "img_position_ids");
  expect_same(in.token_tags, f.get("token_tags"), "token_tags");
  expect_same(in.unique_timesteps, f.get("unique_timesteps"), "unique_timesteps");
  expect_same(in.inverse_indices, f.get("inverse_indices"), "inverse_indices");
  expect_same(p.timesteps, f.get("timesteps"), "timesteps");
  expect_same(in.img_pos, f.get("img_pos_info.position_ids"), "img_pos");
  expect_same(in.audio_pos, f.get("audio_pos_info.position_ids"), "audio_pos");
  expect_same(in.text_pos, f.get("text_pos_info.position_ids"), "text_pos");
  expect_same(in.cu_seqlens, f.get("packed_seq_params.cu_seqlens_q"), "cu_seqlens");
  expect_same(in.refiner_cu_seqlens, f.get("refiner_packed_seq_params.cu_seqlens_q"), "refiner cu_seqlens");
  expect_same(p.update_mask, f.get("update_mask"), "update_mask");
  // The unpacked prediction side: -unpatchify / -unpack of the target rows.
  const auto pred = h3_prediction(lay, {f.get("video_logits"), f.get("audio_logits")});
  expect_same(pred.video, f.get("pred_video"), "pred_video");
  expect_same(pred.audio, f.get("pred_audio"), "pred_audio");
}

// The keyframe rows as MiniMaxH3Unit_KeyframeEncoder makes them: 0.999 * clean + 0.001 * noise, the noise the first
// latent frame of randn([1, 24, T + K, H, W]) from a fresh CPU generator seeded 42 for each of the K keyframes
// (PyTorch's CPU generator and randn kernel are the same from C++).
TEST(H3Packer, KeyframeRowsFromTheSeededNoise) {
  Fixture f;
  if (!f.files.contains("fixture.keyframe_latent")) GTEST_SKIP() << "no keyframe in this fixture";
  const auto kf = f.get("keyframe_latent"), v = f.get("video_latents");  // [1, C, K, H, W], [1, C, T, H, W]
  const int64_t K = kf.size(2);
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < K; ++i) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
    auto noise =
        torch::randn({1, v.size(1), v.size(2) + K, v.size(3), v.size(4)}, gen, torch::kFloat32).narrow(2, 0, 1);
    rows.push_back(h3_cond_rows(h3_patchify_video(kf.narrow(2, i, 1)), h3_patchify_video(noise), 0.999));
  }
  const auto anchor = torch::cat(rows);
  expect_same(anchor, f.get("keyframe_cond_anchor"), "keyframe_cond_anchor");
  EXPECT_TRUE(torch::equal(h3_cond_rows(anchor, anchor * 2, 1.0), anchor));  // noise_aug 1.0: the clean rows
}

// Video rows (t, h/2, w/2), features c*4 + ph*2 + pw; audio rows channel-major; both round-trip.
TEST(H3Packer, PatchifyAndAudioPackingOrder) {
  auto v = torch::arange(2 * 3 * 2 * 4, torch::kFloat32).view({1, 2, 3, 2, 4});  // C 2, T 3, H 2, W 4
  auto rows = h3_patchify_video(v);
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{6, 8}));
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t wb = 0; wb < 2; ++wb)
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t ph = 0; ph < 2; ++ph)
          for (int64_t pw = 0; pw < 2; ++pw)
            EXPECT_EQ(rows[t * 2 + wb][c * 4 + ph * 2 + pw].item<float>(), v[0][c][t][ph][wb * 2 + pw].item<float>());
  EXPECT_TRUE(torch::equal(h3_unpatchify_video(rows, 3, 2, 4), v));
  auto a = torch::arange(2 * 3 * 5, torch::kFloat32).view({2, 3, 5});  // [Ch, Da, A]
  auto ar = h3_pack_audio(a);
  EXPECT_TRUE(torch::equal(ar[5 + 2], a.select(0, 1).select(1, 2)));  // channel 1, step 2
  EXPECT_TRUE(torch::equal(h3_unpack_audio(ar, 2, 5), a));
}

// Video latent k sits at origin + 5/3 f(k), f(k) its first pixel frame (1, 4, 4, 4, 4 frames per latent); the last
// keyframe at origin + 5/3 (F - 1) with F = 17n + 5 pixel frames for T = 5n + 2 latents.
TEST(H3Packer, LastKeyframeAndVideoFrameTimes) {
  H3LayoutSpec s;
  s.text_len = 3, s.latent_t = 7, s.latent_h = 2, s.latent_w = 2, s.audio_t = 4, s.keyframes = {0, -1};
  const auto lay = build_h3_layout(s);
  const auto t = column(lay, 0);
  EXPECT_EQ(t[3], 3.0);                                          // first keyframe: the target's first latent
  EXPECT_EQ(t[4], 3.0 + 35.0);                                   // F = 22 frames: 3 + 5/3 * 21
  for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(t[5 + j], 3.0 + j);  // audio ch0 at 1/40 s per latent
  const std::vector<int64_t> frames = {0, 1, 5, 9, 13, 17, 18};
  for (int64_t k = 0; k < 7; ++k) EXPECT_EQ(t[13 + k], 3.0 + 5.0 * frames[k] / 3.0) << k;
  expect_same(lay.img_pos, torch::tensor({3, 4, 13, 14, 15, 16, 17, 18, 19}, torch::kLong), "img_pos");
  EXPECT_EQ(lay.cond_rows, 2);
  // A 2x2 latent is square: one token at the centre of [0, 32).
  EXPECT_EQ(column(lay, 1)[13], 0.0);
  EXPECT_EQ(column(lay, 2)[13], 0.0);
}

// The reference's running float sum of 5/3-spans drifts from 5f/3 by an ulp from the 6th latent on; in float32 (what
// the DiT reads) both are the same number, for any origin a text length can give.
TEST(H3Packer, ExactFrameTimesMatchTheRunningSumInFloat32) {
  H3LayoutSpec s;
  s.latent_t = 300, s.latent_h = 2, s.latent_w = 2;
  const double fpt[5] = {1, 4, 4, 4, 4};
  for (int64_t L : {0, 10, 77, 512}) {
    s.text_len = L;
    const auto t = column(build_h3_layout(s), 0);
    double acc = 0;
    for (int64_t k = 0; k < s.latent_t; ++k) {
      const double reference = static_cast<double>(L) + acc;  // origin + cumsum, as _video_t_grid
      const double ours = t[L + k];
      EXPECT_LE(std::abs(ours - reference), 1e-12 * std::max(1.0, reference)) << L << " " << k;
      EXPECT_EQ(static_cast<float>(ours), static_cast<float>(reference)) << L << " " << k;
      acc += 5.0 / 3.0 * fpt[k % 5];
    }
  }
}

// Ref2VA: each reference on its own aspect-normalised grid; an image takes one unit of the rotary cursor, a video
// with soundtrack packs its audio first and takes max(audio steps, 5/3 frames); the target starts at the cursor.
TEST(H3Packer, Ref2vaGridsAndCursor) {
  H3LayoutSpec s;
  s.text_len = 4, s.latent_t = 2, s.latent_h = 2, s.latent_w = 4, s.audio_t = 3;
  s.references = {{H3RefKind::image, 1, 4, 4, 0}, {H3RefKind::video, 2, 2, 2, 6}, {H3RefKind::audio, 1, 0, 0, 2}};
  const auto lay = build_h3_layout(s);
  const auto t = column(lay, 0), h = column(lay, 1), w = column(lay, 2);
  // image 4x4 latent: square, s = 4: coordinates 0 and 16 on both axes, at t = L.
  for (int64_t r = 4; r < 8; ++r) EXPECT_EQ(t[r], 4.0);
  EXPECT_EQ(h[4], 0.0);
  EXPECT_EQ(w[5], 16.0);
  EXPECT_EQ(h[6], 16.0);
  // video ref at t = 5: 6 audio steps x 2 channels (w = its own single column 0), then 2 frames at 5 and 5 + 5/3.
  for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(t[8 + j], 5.0 + j);
  EXPECT_EQ(t[20], 5.0);
  EXPECT_EQ(t[21], 5.0 + 5.0 / 3.0);
  // cursor += max(6, 5/3 * 5 frames = 8.33): the audio reference starts at 5 + 25/3.
  EXPECT_NEAR(t[22], 5.0 + 25.0 / 3.0, 1e-12);
  // target audio and video at 5 + 25/3 + 2.
  const double target = 5.0 + 25.0 / 3.0 + 2.0;
  EXPECT_NEAR(t[26], target, 1e-12);
  EXPECT_NEAR(t[32], target, 1e-12);
  // 2x4 target: s = sqrt(8), w coordinates -6.63 and 15.99; the audio channels sit on them.
  EXPECT_NEAR(w[26], 32.0 * (1.0 - 4.0 / std::sqrt(8.0)) / 2.0, 1e-12);
  EXPECT_NEAR(w[29], w[33], 0.0);
  EXPECT_EQ(lay.cond_rows, 6);        // 4 image rows + 2 video rows
  EXPECT_EQ(lay.ref_audio_rows, 16);  // 12 soundtrack + 4 audio reference
  expect_same(lay.audio_pos.narrow(0, 0, 12), torch::arange(8, 20, torch::kLong), "soundtrack rows");
  expect_same(lay.img_pos, torch::tensor({4, 5, 6, 7, 20, 21, 32, 33, 34, 35}, torch::kLong), "img_pos");
  EXPECT_EQ(lay.used, 36);
  EXPECT_EQ(lay.seq_len, 64);
}

// Per-frame video times (diffusion forcing), per-step audio times, conditioning at max(t, 0.999), reference audio at
// max(t, 1.0); rows share AdaLN rows through the sorted unique set.
TEST(H3Packer, PerFrameTimestepsAndConditioningFloors) {
  H3LayoutSpec s;
  s.text_len = 2, s.latent_t = 3, s.latent_h = 2, s.latent_w = 2, s.audio_t = 2;
  s.references = {{H3RefKind::image, 1, 2, 2, 0}, {H3RefKind::audio, 1, 0, 0, 1}};
  const auto lay = build_h3_layout(s);
  H3Content c;
  c.video_latents = torch::randn({1, 24, 3, 2, 2});
  c.audio_latents = torch::randn({2, 32, 2});
  c.prompt_embeds = torch::randn({2, 8});
  c.cond_rows = torch::randn({1, 96});
  c.ref_audio_rows = torch::randn({2, 32});
  H3Times t;
  t.video = {0.2, 0.5, 0.9};
  t.audio = {0.3, 0.4};
  test::expect_error([&] { pack_h3(lay, c, t); }, {"times.text"});
  t.text = 0.5;
  const auto p = pack_h3(lay, c, t);
  // rows: text 0-1 | image 2 | ref audio 3-4 | target audio 5-8 | video 9-11
  const std::vector<float> expect = {0.5f, 0.5f, 0.999f, 1.0f, 1.0f, 0.3f, 0.4f, 0.3f, 0.4f, 0.2f, 0.5f, 0.9f};
  for (size_t r = 0; r < expect.size(); ++r) EXPECT_EQ(p.timesteps[r].item<float>(), expect[r]) << r;
  for (int64_t r = 12; r < 64; ++r) EXPECT_EQ(p.timesteps[r].item<float>(), 0.5f) << "padding takes the text time";
  expect_same(p.inputs.unique_timesteps, torch::tensor({0.2f, 0.3f, 0.4f, 0.5f, 0.9f, 0.999f, 1.0f}), "unique");
  expect_same(p.inputs.unique_timesteps.index_select(0, p.inputs.inverse_indices), p.timesteps, "inverse");
  expect_same(p.update_mask, torch::tensor({false, true, true, true}), "update_mask");
  expect_same(p.audio_update_mask, torch::tensor({false, false, true, true, true, true}), "audio_update_mask");
  EXPECT_TRUE(torch::equal(p.inputs.x[0][2], c.cond_rows[0]));
  EXPECT_TRUE(torch::equal(p.inputs.audio_x[0][4], c.ref_audio_rows[1]));
}

// Rows round up to a multiple of 64; a full last block leaves an empty padding segment; T2VA has no cond rows.
TEST(H3Packer, RoundsRowsUpTo64) {
  H3LayoutSpec s;
  s.text_len = 6, s.latent_t = 2, s.latent_h = 4, s.latent_w = 4, s.audio_t = 25;  // 6 + 50 + 8 = 64
  auto lay = build_h3_layout(s);
  EXPECT_EQ(lay.seq_len, 64);
  expect_same(lay.cu_seqlens, torch::tensor({0, 64, 64}, torch::kInt32), "cu_seqlens");
  EXPECT_EQ(lay.cond_rows, 0);
  EXPECT_EQ(lay.token_tags.lt(0).sum().item<int64_t>(), 0);
  s.text_len = 7;
  lay = build_h3_layout(s);
  EXPECT_EQ(lay.seq_len, 128);
  expect_same(lay.cu_seqlens, torch::tensor({0, 65, 128}, torch::kInt32), "cu_seqlens");
  EXPECT_EQ(lay.token_tags.lt(0).sum().item<int64_t>(), 63);
  expect_same(lay.refiner_cu_seqlens, torch::tensor({0, 7, 7}, torch::kInt32), "refiner cu_seqlens");
  s.latent_w = 5;
  test::expect_error([&] { build_h3_layout(s); }, {"even H, W"});
  s.latent_w = 4, s.keyframes = {1};
  test::expect_error([&] { build_h3_layout(s); }, {"keyframe index 1"});
}

}  // namespace
}  // namespace vdt
