#include <torch/torch.h>

#include <cstdio>

#include "core/safetensors.h"
#include "test_util.h"
#include "tools/h3_parity.h"

namespace vdt {
namespace {

ParityConfig h3_tiny() {
  ParityConfig cfg;
  cfg.fixture = test::fixture("h3_tiny_a.safetensors");
  return cfg;
}

const ParityRow* find(const H3ParityResult& r, const std::string& name) {
  for (const auto& row : r.rows)
    if (row.name == name) return &row;
  return nullptr;
}

// The real H3 DiT (float32, CPU): logits, predictions, the three loss values and every reference gradient (eleven
// in h3_tiny_a) within 1e-5 relative L2, then the same call rebuilt by the packer from the unpacked inputs.
TEST(H3Parity, TinyAForwardLossGradientsAndPacker) {
  const auto cfg = h3_tiny();
  const auto r = run_h3_parity(cfg);
  for (const auto& row : r.rows)
    std::printf("  %-56s rel_l2 %.3e  %s\n", row.name.c_str(), row.rel_l2, row.pass ? "ok" : "FAIL");
  for (const auto& n : r.notes) std::printf("  note: %s\n", n.c_str());
  std::vector<std::string> expected = {"fixture.video_logits", "fixture.audio_logits", "fixture.pred_video",
                                       "fixture.pred_audio",   "fixture.loss",         "fixture.loss_video",
                                       "fixture.loss_audio"};
  if (r.notes.empty())  // the packer rows are there unless a note says why not
    for (const char* k : {"packer.x", "packer.img_position_ids", "packer.video_logits", "packer.audio_logits"})
      expected.push_back(k);
  for (const auto& name : expected) EXPECT_NE(find(r, name), nullptr) << name;
  size_t grads = 0, stored_grads = 0;
  for (const auto& k : SafetensorsSet::open({cfg.fixture}).keys()) stored_grads += k.rfind("fixture.grad.", 0) == 0;
  for (const auto& row : r.rows) {
    grads += row.name.rfind("fixture.grad.", 0) == 0;
    EXPECT_LE(row.rel_l2, 1e-5) << row.name;
    // The packed inputs are reproduced exactly (float64 positions: up to the reference's running-sum ulps).
    if (row.name == "packer.img_position_ids") {
      EXPECT_LE(row.rel_l2, 1e-15);
    } else if (row.name.rfind("packer.", 0) == 0 && row.name != "packer.video_logits" &&
               row.name != "packer.audio_logits") {
      EXPECT_EQ(row.rel_l2, 0.0) << row.name;
    }
  }
  EXPECT_EQ(grads, stored_grads);
  EXPECT_GE(grads, 1u);
  EXPECT_TRUE(r.pass());
}

TEST(H3Parity, EagerAttentionPassesToo) {
  H3ParityOptions opts;
  opts.kernel = AttentionKernel::eager;
  opts.packer = false;
  const auto r = run_h3_parity(h3_tiny(), opts);
  EXPECT_TRUE(r.pass());
  EXPECT_EQ(find(r, "packer.x"), nullptr);
}

TEST(H3Parity, RecognisesH3FixturesAndFailsAnImpossibleTolerance) {
  EXPECT_TRUE(is_h3_fixture(SafetensorsSet::open({test::fixture("h3_tiny_a.safetensors")}).metadata()));
  EXPECT_FALSE(is_h3_fixture(SafetensorsSet::open({test::fixture("wan_tiny_a.safetensors")}).metadata()));
  auto cfg = h3_tiny();
  cfg.tol = 0;
  H3ParityOptions opts;
  opts.packer = false;
  EXPECT_FALSE(run_h3_parity(cfg, opts).pass());
  cfg.fixture = test::fixture("flow_match_wan.safetensors");
  test::expect_error([&] { run_h3_parity(cfg); }, {"lacks 'config'"});
}

// `vdt parity` reads the family from the fixture's metadata: the H3 fixture runs the H3 model and packer.
TEST(H3Parity, CliDispatchesOnTheFixturesFamily) {
  auto ok = test::run_vdt("parity " + test::fixture("h3_tiny_a.safetensors"));
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("model minimax-h3"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("fixture.video_logits"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("packer.x"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("PASS"), std::string::npos);
  auto strict = test::run_vdt("parity " + test::fixture("h3_tiny_a.safetensors") + " --tol 0");
  EXPECT_EQ(strict.code, 1) << strict.output;
}

// bf16 blocks with the release's fp32 islands (the CPU runs the same casts the GPU does): every row within 5e-2.
TEST(H3Parity, Bf16WithFp32IslandsOnCpu) {
  auto cfg = h3_tiny();
  cfg.dtype = "bfloat16";
  const auto r = run_h3_parity(cfg);
  for (const auto& row : r.rows)
    std::printf("  bf16 %-51s rel_l2 %.3e  %s\n", row.name.c_str(), row.rel_l2, row.pass ? "ok" : "FAIL");
  EXPECT_TRUE(r.pass());
  EXPECT_GT(find(r, "fixture.video_logits")->rel_l2, 1e-5);  // it really ran in bf16
}

// bf16 with the fp32 islands on CUDA (skipped without a GPU): the same rows within the bf16 tolerance.
TEST(H3Parity, CudaBf16WithFp32Islands) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string dtype : {"float32", "bfloat16"}) {
    auto cfg = h3_tiny();
    cfg.device = "cuda";
    cfg.dtype = dtype;
    const auto r = run_h3_parity(cfg);
    for (const auto& row : r.rows)
      std::printf("  cuda %s %-50s rel_l2 %.3e  %s\n", dtype.c_str(), row.name.c_str(), row.rel_l2,
                  row.pass ? "ok" : "FAIL");
    EXPECT_TRUE(r.pass()) << dtype;
  }
}

}  // namespace
}  // namespace vdt
