// The LoRA file's metadata has one owner (generate/lora_file.h): what the struct writes it reads back field for field,
// a few-step student's steps and schedule included; keys a file lacks keep their defaults; a bad value names the file
// and the key. load_generation_model rebuilds the base a file names and loads its factors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/safetensors.h"
#include "generate/generation_model.h"
#include "generate/lora_file.h"
#include "model/lora.h"
#include "test_util.h"

namespace vdt {
namespace {

LoraFileMeta sample_meta() {
  LoraFileMeta m;
  m.base = "tiny", m.model = "tiny", m.text_handling = "cross-attention per frame", m.weights = "/w/base.safetensors";
  m.step = 1200, m.objective = "teacher_forcing", m.span_chunks = 7, m.level_shift = 0.35, m.chunk_frames = 2;
  m.rank = 8, m.alpha = 4.5, m.targets = {"q", "k", "ffn.0"}, m.seed = 18446744073709551615ull, m.val_clips = 3,
  m.clean_first_frame = true;
  m.picture1 = "2048";
  m.student_steps = 4, m.student_timesteps = {1000, 937.5, 833.3333333333334, 625}, m.student_cfg = 1.0;
  return m;
}

void expect_same(const LoraFileMeta& a, const LoraFileMeta& b) {
  EXPECT_EQ(a.base, b.base);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.text_handling, b.text_handling);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.objective, b.objective);
  EXPECT_EQ(a.span_chunks, b.span_chunks);
  EXPECT_EQ(a.level_shift, b.level_shift);
  EXPECT_EQ(a.chunk_frames, b.chunk_frames);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.alpha, b.alpha);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.val_clips, b.val_clips);
  EXPECT_EQ(a.clean_first_frame, b.clean_first_frame);
  EXPECT_EQ(a.picture1, b.picture1);
  EXPECT_EQ(a.student_steps, b.student_steps);
  EXPECT_EQ(a.student_timesteps, b.student_timesteps);
  EXPECT_EQ(a.student_cfg, b.student_cfg);
}

TEST(LoraFile, MetadataRoundTripsThroughTheFile) {
  test::TempDir dir;
  const auto m = sample_meta();
  expect_same(LoraFileMeta::from_metadata(m.to_metadata(), "x"), m);
  // Through a file with factors: the Python trainer's keys as strings, the per-module alpha beside the factors.
  const auto path = dir.file("lora.safetensors");
  save_lora_file(path, m,
                 {{"blocks.0.self_attn.q.lora_A.weight", torch::ones({8, 4})},
                  {"blocks.0.self_attn.q.lora_B.weight", torch::zeros({4, 8})}});
  expect_same(read_lora_meta(path), m);
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata().at("level_shift"), "0.35");
  EXPECT_EQ(f->metadata().at("alpha"), "4.5");
  EXPECT_EQ(f->metadata().at("student_schedule"), "1000.0,937.5,833.3333333333334,625.0");
  EXPECT_EQ(f->get("blocks.0.self_attn.q.alpha").item<float>(), 4.5f);
  EXPECT_EQ(f->get("blocks.0.self_attn.q.lora_A.weight").scalar_type(), torch::kBFloat16);
  // Not a student: no student keys written, none read.
  LoraFileMeta plain = m;
  plain.student_steps = 0, plain.student_timesteps.clear();
  EXPECT_EQ(plain.to_metadata().count("student_steps"), 0u);
  expect_same(LoraFileMeta::from_metadata(plain.to_metadata(), "x"), plain);
}

TEST(LoraFile, MissingKeysKeepDefaultsAndBadValuesNameTheKey) {
  const auto d = LoraFileMeta::from_metadata({{"base", "wan2.2-ti2v-5b"}}, "old.safetensors");
  EXPECT_EQ(d.model, "wan2.2-ti2v-5b");  // a file that names its base only
  EXPECT_EQ(d.chunk_frames, 3);
  EXPECT_EQ(d.span_chunks, 6);
  EXPECT_EQ(d.val_clips, 12);
  EXPECT_EQ(d.student_steps, 0);
  test::expect_error(
      [] {
        LoraFileMeta::from_metadata({{"seed", "-3"}}, "f.safetensors");
      },
      {"f.safetensors", "'seed'"});
  test::expect_error(
      [] {
        LoraFileMeta::from_metadata({{"chunk_frames", "two"}}, "f.safetensors");
      },
      {"f.safetensors", "chunk_frames"});
  test::expect_error(
      [] {
        LoraFileMeta::from_metadata({{"clean_first_frame", "yes"}}, "f.safetensors");
      },
      {"clean_first_frame", "0 or 1"});
  test::expect_error(
      [] {
        LoraFileMeta::from_metadata({{"student_steps", "3"}, {"student_schedule", "1000,500"}}, "f.safetensors");
      },
      {"student_steps 3", "2 timesteps"});
  test::expect_error(
      [] {
        LoraFileMeta::from_metadata({{"student_steps", "1"}, {"student_schedule", "x"}}, "f");
      },
      {"student_schedule", "comma-separated"});
}

// A file written for the tiny preset loads onto a rebuilt base with its factors.
TEST(LoraFile, LoadGenerationModelRebuildsTheBaseAndLoadsTheFactors) {
  test::TempDir dir;
  auto model = build_base("tiny", "", 7, torch::kCPU, torch::kFloat32);
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 4, lc.targets = model->lora_targets();
  auto factors = attach_lora(*model, lc, 3);
  for (auto& [name, t] : factors) t.data().normal_(0, 0.1);
  LoraFileMeta m;
  m.base = m.model = "tiny", m.rank = 4, m.alpha = 4, m.seed = 7, m.chunk_frames = 1;
  const auto path = dir.file("lora_step00002.safetensors");
  save_lora_file(path, m, factors);
  const auto g = load_generation_model(path, "", torch::kCPU, torch::kFloat32);
  EXPECT_EQ(g.meta.chunk_frames, 1);
  const auto loaded = lora_state(*g.model);
  ASSERT_EQ(loaded.size(), factors.size());
  for (size_t i = 0; i < factors.size(); ++i)
    EXPECT_TRUE(torch::allclose(loaded[i].second, factors[i].second.to(torch::kBFloat16).to(torch::kFloat32)))
        << factors[i].first;
}

}  // namespace
}  // namespace vdt
