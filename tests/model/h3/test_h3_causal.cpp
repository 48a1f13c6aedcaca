// The block-causal H3 sequence (docs/h3_model.md §4) and H3 through the base-model seam: audio-to-chunk assignment and
// the row order / attention rule against hand-written cases, a chunk's prediction independent of later chunks
// (diffusion and teacher forcing), the prefix and mask kernels equal, and the seam's bidirectional forward equal to the
// packer's own path.
#include <torch/torch.h>

#include "model/h3/h3_causal.h"
#include "model/h3/h3_dit.h"
#include "test_util.h"

namespace vdt {
namespace {

double rel_l2(const torch::Tensor& a, const torch::Tensor& b) {
  auto af = a.to(torch::kDouble), bf = b.to(torch::kDouble);
  return ((af - bf).norm() / bf.norm().clamp_min(1e-30)).item<double>();
}

// docs/h3_model.md §4.1: chunk c of one clip owns steps [ceil(85c/3), ceil(85(c+1)/3)): 29, 28, 28 repeating.
TEST(H3Causal, AudioStepsGoToTheChunkOfTheirRotaryTime) {
  EXPECT_EQ(h3_audio_chunk_bounds(30, 5), (std::vector<int64_t>{0, 29, 57, 85, 114, 142, 170}));
  // Latents' first pixel frames 0, 1, 5, 9, 13 | 17, 18: chunks of one latent own j >= ceil(5f/3).
  EXPECT_EQ(h3_audio_chunk_bounds(6, 1), (std::vector<int64_t>{0, 2, 9, 15, 22, 29, 30}));
  EXPECT_EQ(h3_span_audio_steps(37), 207);  // 124 frames -> 207 audio latents (§1.5)
  test::expect_error([] { h3_audio_chunk_bounds(7, 2); }, {"7 latent frames", "chunks of 2", "--chunk-frames"});
}

// Text 2, Picture 1 (one 2x2-latent image: 1 row), 2 chunks of 1 latent (2x2 latents: 1 row each) and their audio:
// first pixel frames 0, 1 | 5 -> h3_audio_chunk_bounds(2, 1) = {0, 2, 9}, 9 steps per channel.
struct TinyLayout {
  H3Layout layout;
  H3Packed noisy, clean;
  TinyLayout() {
    H3LayoutSpec sp;
    sp.text_len = 2, sp.latent_t = 2, sp.latent_h = 2, sp.latent_w = 2, sp.audio_t = 9, sp.seq_align = 8;
    sp.references.push_back({H3RefKind::image, 1, 2, 2, 0});
    layout = build_h3_layout(sp);
    H3Content c;
    c.video_latents = torch::randn({1, 1, 2, 2, 2});
    c.audio_latents = torch::randn({2, 3, 9});
    c.prompt_embeds = torch::randn({2, 5});
    c.cond_rows = torch::randn({1, 4});
    H3Times t;
    t.video = {0.2, 0.7}, t.audio = {0.2, 0.2, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7}, t.text = 0.999;
    noisy = pack_h3(layout, c, t);
    t.video = {1.0, 1.0}, t.audio = std::vector<double>(9, 1.0);
    clean = pack_h3(layout, c, t);
  }
};

std::vector<int64_t> range(int64_t a, int64_t b) {
  std::vector<int64_t> v;
  for (int64_t i = a; i < b; ++i) v.push_back(i);
  return v;
}
std::vector<int64_t> join(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> v;
  for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}
using Ranges = std::vector<std::pair<int64_t, int64_t>>;
std::vector<int64_t> list(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU, torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

TEST(H3Causal, RowsInChunkOrderAndTheStaircase) {
  torch::manual_seed(0);
  TinyLayout l;
  EXPECT_EQ(h3_audio_chunk_bounds(2, 1), (std::vector<int64_t>{0, 2, 9}));
  // Layout rows: text 0, 1 | Picture 1 2 | audio ch0 3..11, ch1 12..20 | video 21, 22 | pad 23.
  const auto in = h3_block_causal(l.layout, l.noisy, nullptr, 1);
  // [P: text, Picture 1 | chunk 0: ch0 j0-1, ch1 j0-1, frame 0 | chunk 1: ch0 j2-8, ch1 j2-8, frame 1 | pad]
  const auto src = join({{0, 1, 2}, {3, 4, 12, 13, 21}, range(5, 12), range(14, 21), {22}});
  const auto pos = l.noisy.inputs.position_ids[0];
  for (size_t r = 0; r < src.size(); ++r)
    EXPECT_TRUE(torch::equal(in.position_ids[0][static_cast<int64_t>(r)], pos[src[r]])) << "row " << r;
  EXPECT_EQ(in.x.size(1), 24);  // 23 rows, padded to a multiple of 8
  EXPECT_EQ(list(in.out_pos), (std::vector<int64_t>{7, 22}));
  EXPECT_EQ(list(in.audio_pos), join({{3, 4}, range(8, 15), {5, 6}, range(15, 22)}));  // per channel, in step order
  ASSERT_EQ(in.attend.blocks.size(), 4u);
  EXPECT_EQ(in.attend.blocks[0].keys, (Ranges{{0, 3}}));    // P sees P
  EXPECT_EQ(in.attend.blocks[1].keys, (Ranges{{0, 8}}));    // chunk 0: P and itself
  EXPECT_EQ(in.attend.blocks[2].keys, (Ranges{{0, 23}}));   // chunk 1: P, chunk 0, itself
  EXPECT_EQ(in.attend.blocks[3].keys, (Ranges{{23, 24}}));  // padding: itself
  // Per-row model time moves with the rows: chunk 1's frame (row 22) at 0.7, Picture 1 at 0.999.
  auto t = in.unique_timesteps.index_select(0, in.inverse_indices);
  EXPECT_FLOAT_EQ(t[22].item<float>(), 0.7f);
  EXPECT_FLOAT_EQ(t[2].item<float>(), 0.999f);
}

TEST(H3Causal, TeacherForcingCopiesShareCoordinates) {
  torch::manual_seed(0);
  TinyLayout l;
  const auto in = h3_block_causal(l.layout, l.noisy, &l.clean, 1);
  // [P 0..2 | clean c0 3..7 | clean c1 8..22 | noisy c0 23..27 | noisy c1 28..42 | pad 43..47]
  EXPECT_EQ(in.x.size(1), 48);
  for (int64_t r = 3; r < 23; ++r) EXPECT_TRUE(torch::equal(in.position_ids[0][r], in.position_ids[0][r + 20])) << r;
  EXPECT_EQ(list(in.out_pos), (std::vector<int64_t>{7, 22, 27, 42}));  // clean frames, then noisy
  const auto& b = in.attend.blocks;
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(b[1].keys, (Ranges{{0, 8}}));            // clean c0: P, itself
  EXPECT_EQ(b[2].keys, (Ranges{{0, 23}}));           // clean c1: P, clean c0, itself
  EXPECT_EQ(b[3].keys, (Ranges{{0, 3}, {23, 28}}));  // noisy c0: P, itself
  EXPECT_EQ(b[4].keys, (Ranges{{0, 8}, {28, 43}}));  // noisy c1: P, clean c0, itself
  auto t = in.unique_timesteps.index_select(0, in.inverse_indices);
  EXPECT_FLOAT_EQ(t[7].item<float>(), 1.0f);   // clean copy of frame 0
  EXPECT_FLOAT_EQ(t[27].item<float>(), 0.2f);  // noisy frame 0
}

// The step's FLOP count (h3_train_flops) attends the pairs the packer's layout does: the whole-sequence count less the
// block-causal one is 4·N·Dh per pair left out, per block, 2x for a step on a frozen base.
TEST(H3Causal, TheFlopCountAttendsThePairsOfTheLayout) {
  TinyLayout l;
  const auto cfg = h3_preset("h3-tiny");
  for (const bool teacher : {false, true}) {
    SCOPED_TRACE(teacher ? "teacher forcing" : "diffusion forcing");
    const auto in = h3_block_causal(l.layout, l.noisy, teacher ? &l.clean : nullptr, 1);
    const int64_t used = in.cu_seqlens[1].item<int>();  // rows before the padding
    double pairs = 0;
    for (const auto& b : in.attend.blocks) {
      if (b.begin >= used) continue;
      int64_t keys = 0;
      for (const auto& [first, second] : b.keys) keys += second - first;
      pairs += static_cast<double>((b.end - b.begin) * keys);
    }
    WindowShape w;
    w.text_len = 2, w.frames = 2, w.latent_h = 2, w.latent_w = 2, w.chunk_frames = 1, w.cond_rows = 1;
    w.copies = teacher ? 2 : 1;
    auto whole = w;
    whole.chunk_frames = 0;  // every pair of the same rows
    const double per_pair = 2.0 * cfg.num_layers * 4 * cfg.inner();
    const double left_out = (h3_train_flops(cfg, whole, true) - h3_train_flops(cfg, w, true)) / per_pair;
    EXPECT_NEAR(left_out, static_cast<double>(used * used) - pairs, 1e-6 * pairs);
    EXPECT_GT(left_out, 0);
  }
}

struct Seam {
  H3DiT model{h3_preset("h3-tiny")};
  DenoiserInputs in;
  Seam(int64_t frames, bool teacher) {
    torch::manual_seed(1);
    model->init_weights(5);
    const int64_t F = teacher ? 2 * frames : frames, A = h3_span_audio_steps(frames) * (teacher ? 2 : 1);
    in.x = torch::randn({1, 24, F, 4, 4});
    in.t = torch::rand({1, F}) * 1000;
    in.context = torch::randn({1, 6, 48});
    in.extra["picture1"] = torch::randn({1, 24, 1, 2, 4});
    in.extra["audio"] = torch::randn({1, 2, 32, A});
    in.extra["audio.t"] = torch::rand({1, A}) * 1000;
    in.extra["text_tags"] = torch::tensor({{1, 0, 0, 1, 1, 1}});
  }
};

// Changing the last chunk (its video and its audio) leaves every earlier chunk's prediction bit for bit.
TEST(H3Causal, AChunksOutputIsIndependentOfLaterChunks) {
  for (const bool teacher : {false, true}) {
    Seam s(6, teacher);  // 3 chunks of 2 latents
    torch::NoGradGuard ng;
    s.in.attention = AttentionPattern::forcing(2, teacher);
    DenoiserAux a1, a2;
    const auto p1 = s.model->forward(s.in, &a1);
    const auto bounds = h3_audio_chunk_bounds(6, 2);  // {0, 9, 22, 30}
    auto later = s.in;
    const int64_t F = s.in.x.size(2), A = s.in.extra["audio"].size(3), f0 = F - 2, a0 = A - (30 - bounds[2]);
    later.x = s.in.x.clone(), later.x.narrow(2, f0, 2).normal_();
    later.extra["audio"] = s.in.extra["audio"].clone(), later.extra["audio"].narrow(3, a0, A - a0).normal_();
    const auto p2 = s.model->forward(later, &a2);
    EXPECT_EQ(p1.sizes(), s.in.x.sizes());
    EXPECT_EQ(a1.streams["audio"].sizes(), s.in.extra["audio"].sizes());
    EXPECT_TRUE(torch::equal(p1.narrow(2, 0, f0), p2.narrow(2, 0, f0))) << "teacher " << teacher;
    EXPECT_TRUE(torch::equal(a1.streams["audio"].narrow(3, 0, a0), a2.streams["audio"].narrow(3, 0, a0)));
    EXPECT_GT(rel_l2(p2.narrow(2, f0, 2), p1.narrow(2, f0, 2)), 1e-3);
    if (teacher) {  // the noisy copy of chunk 0 does not see the clean copy of chunk 0 or anything later
      auto clean0 = s.in;
      clean0.x = s.in.x.clone(), clean0.x.narrow(2, 0, 2).normal_();
      const auto p3 = s.model->forward(clean0);
      EXPECT_TRUE(torch::equal(p1.narrow(2, F / 2, 2), p3.narrow(2, F / 2, 2)));
    }
  }
}

TEST(H3Causal, PrefixAndMaskKernelsAgree) {
  Seam s(6, false);
  torch::NoGradGuard ng;
  s.in.attention = AttentionPattern::block_causal(2);
  const auto prefix = s.model->forward(s.in);
  s.model->set_causal_kernel(CausalKernel::mask);
  const auto mask = s.model->forward(s.in);
  EXPECT_LT(rel_l2(mask, prefix), 1e-5);
}

// Bidirectional: the seam is pack_h3 + the packed forward + h3_prediction, with model time 1 - t/1000.
TEST(H3Causal, BidirectionalSeamIsThePackersPath) {
  Seam s(3, false);
  torch::NoGradGuard ng;
  s.in.t = torch::full({1}, 400.0);
  s.in.extra["audio.t"] = torch::full({1, s.in.extra["audio"].size(3)}, 400.0);
  DenoiserAux aux;
  const auto seam = s.model->forward(s.in, &aux);
  H3LayoutSpec sp;
  sp.text_len = 6, sp.latent_t = 3, sp.latent_h = 4, sp.latent_w = 4, sp.audio_t = s.in.extra["audio"].size(3);
  sp.references.push_back({H3RefKind::image, 1, 2, 4, 0});
  const auto layout = build_h3_layout(sp);
  H3Content c;
  c.video_latents = s.in.x, c.audio_latents = s.in.extra["audio"][0], c.prompt_embeds = s.in.context[0];
  c.text_tags = s.in.extra["text_tags"][0];
  c.cond_rows = h3_cond_rows(h3_patchify_video(s.in.extra["picture1"]), torch::zeros({2, 96}), 0.999);
  H3Times t;
  t.video = {1.0 - 400.0 / 1000}, t.audio = {1.0 - 400.0 / 1000};
  const auto packed = pack_h3(layout, c, t);
  const auto pred = h3_prediction(layout, s.model->forward(packed.inputs));
  EXPECT_TRUE(torch::equal(seam, pred.video.to(seam.scalar_type())));
  EXPECT_TRUE(torch::equal(aux.streams["audio"][0], pred.audio));
  EXPECT_EQ(s.model->family(), "h3");
  EXPECT_EQ(s.model->block_modules().size(), 2u);
  test::expect_error(
      [&] {
        auto bad = s.in;
        bad.extra["audio_t"] = bad.extra["audio.t"];
        s.model->forward(bad);
      },
      {"unknown input 'audio_t'", "audio.t"});
}

}  // namespace
}  // namespace vdt
