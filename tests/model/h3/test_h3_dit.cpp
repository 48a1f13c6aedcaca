#include <torch/torch.h>

#include <cmath>
#include <set>

#include "core/safetensors.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_weights.h"
#include "model/lora.h"
#include "test_util.h"
#include "tools/h3_parity.h"
#include "tools/parity.h"

namespace vdt {
namespace {

struct DitFixture {
  SafetensorsSet files = SafetensorsSet::open({test::fixture("h3_tiny_a.safetensors")});
  H3DiT model{H3Config::from_json(files.metadata().at("config"), "h3_tiny_a")};
  H3Inputs in;
  int64_t S = 0, used = 0;  // packed rows, real rows
  DitFixture() {
    load_h3_weights(*model, files);
    in = h3_fixture_inputs(files, torch::kCPU);
    S = in.x.size(1);
    used = in.cu_seqlens[1].item<int64_t>();
  }
  torch::Tensor ref(const std::string& k) const { return files.get(k); }
};

// The slow, obvious reference: full attention under a block-diagonal mask built from the segment bounds.
TEST(H3Attention, SegmentsEqualABlockDiagonalMask) {
  torch::manual_seed(3);
  auto q = torch::randn({13, 2, 8}), k = torch::randn({13, 2, 8}), v = torch::randn({13, 2, 8});
  const std::vector<int64_t> bounds = {0, 5, 5, 11, 13};
  auto seg = torch::zeros({13}, torch::kLong);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) seg.narrow(0, bounds[i], bounds[i + 1] - bounds[i]).fill_(int64_t(i));
  auto mask = seg.unsqueeze(1).eq(seg.unsqueeze(0));  // [S, S]
  auto scores = torch::einsum("qnd,knd->nqk", {q, k}) / std::sqrt(8.0);
  auto expect = torch::einsum("nqk,knd->qnd", {torch::softmax(scores.masked_fill(~mask, -INFINITY), -1), v});
  for (auto kernel : {AttentionKernel::sdpa, AttentionKernel::eager})
    EXPECT_LT(rel_l2(segment_attention(q, k, v, bounds, kernel), expect), 1e-6);
  test::expect_error([&] { segment_attention(q, k, v, {0, 5, 12}, AttentionKernel::sdpa); }, {"0 to S = 13"});
}

// Rotate-half over the first 6R channels (d pairs with d + 3R), angles pos_axis * 10000^(-i/R), the rest untouched.
TEST(H3Attention, RopeRotatesPairsDAndDPlus3R) {
  const int64_t R = 2, Dh = 16;
  auto pos = torch::tensor({{3.0, -1.5, 7.25}}, torch::kFloat64);  // [1, 3]
  auto x = torch::randn({1, 1, Dh});
  auto y = h3_apply_rope(x, h3_rope_table(pos, R));
  for (int64_t d = 0; d < 3 * R; ++d) {
    const int64_t axis = d / R, i = d % R;
    const double angle = pos[0][axis].item<double>() * std::pow(10000.0, -static_cast<double>(i) / R);
    const double a = x[0][0][d].item<double>(), b = x[0][0][d + 3 * R].item<double>();
    EXPECT_NEAR(y[0][0][d].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-5) << d;
    EXPECT_NEAR(y[0][0][d + 3 * R].item<double>(), b * std::cos(angle) + a * std::sin(angle), 1e-5) << d;
  }
  EXPECT_TRUE(torch::equal(y.narrow(-1, 6 * R, Dh - 6 * R), x.narrow(-1, 6 * R, Dh - 6 * R)));
}

TEST(H3DiT, EagerAttentionMatchesSdpa) {
  DitFixture f;
  torch::NoGradGuard ng;
  const auto sdpa = f.model->forward(f.in);
  f.model->set_attention_kernel(AttentionKernel::eager);
  const auto eager = f.model->forward(f.in);
  EXPECT_LT(rel_l2(eager.video_logits, sdpa.video_logits), 1e-6);
  EXPECT_LT(rel_l2(eager.audio_logits, sdpa.audio_logits), 1e-6);
  EXPECT_LT(rel_l2(eager.video_logits, f.ref("fixture.video_logits")), 1e-5);
}

// The stored rope.inv_freq is never read (the reference recomputes it), and the padding segment does not reach the
// real rows, while joining it to them does (FIXTURES.md: ~4e-2).
TEST(H3DiT, StoredInvFreqIsIgnoredAndPaddingIsItsOwnSegment) {
  DitFixture f;
  torch::NoGradGuard ng;
  const auto base = f.model->forward(f.in);
  f.model->rope->inv_freq.mul_(3.0);
  const auto same = f.model->forward(f.in);
  EXPECT_TRUE(torch::equal(same.video_logits, base.video_logits));
  ASSERT_LT(f.used, f.S) << "this fixture has no padding";
  auto joined = f.in;
  joined.cu_seqlens = torch::tensor({0, static_cast<int>(f.S)}, torch::kInt32);
  EXPECT_GT(rel_l2(f.model->forward(joined).video_logits, base.video_logits), 1e-3);
  auto bad = f.in;
  bad.cu_seqlens = torch::tensor({0, static_cast<int>(f.used), static_cast<int>(f.S - 1)}, torch::kInt32);
  test::expect_error([&] { f.model->forward(bad); }, {"cu_seqlens", "0 to " + std::to_string(f.S)});
  bad = f.in;
  bad.x = torch::zeros({1, f.S, 95});
  test::expect_error([&] { f.model->forward(bad); }, {"x [1, S, 96]", "[1, " + std::to_string(f.S) + ", 95]"});
}

// A block runner wraps every block call from outside (checkpointing, offload) without changing the result.
TEST(H3DiT, BlockRunnerWrapsEveryBlock) {
  DitFixture f;
  torch::NoGradGuard ng;
  const auto base = f.model->forward(f.in);
  int calls = 0;
  f.model->set_block_runner([&](const BlockCall& call) {
    ++calls;
    return call.run(call.inputs);
  });
  const auto wrapped = f.model->forward(f.in);
  EXPECT_EQ(calls, f.model->config().num_layers);
  EXPECT_TRUE(torch::equal(wrapped.video_logits, base.video_logits));
}

// DiffSynth's LoRA targets (attn.qkv_proj, attn.out_proj, mlp.fc1, mlp.fc2) attach to the DiT and refiner blocks
// under the checkpoint names (PEFT's suffix match hits both), and a fresh LoRA (B = 0) leaves the output unchanged;
// a non-zero B reaches the output through the blocks' forward.
TEST(H3DiT, LoraAttachesToDiffSynthsTargets) {
  DitFixture f;
  const auto base = f.model->forward(f.in).video_logits.detach();
  LoraConfig cfg;
  cfg.rank = 4, cfg.alpha = 4, cfg.targets = {"qkv_proj", "out_proj", "fc1", "fc2"};
  const auto params = attach_lora(*f.model, cfg, 7);
  const auto& c = f.model->config();
  EXPECT_EQ(params.size(), static_cast<size_t>(2 * 4 * (c.num_layers + c.refiner_layers)));  // (A, B) x 4 targets
  std::set<std::string> names;
  for (const auto& kv : params) names.insert(kv.first);
  EXPECT_TRUE(names.count("blocks.0.attn.qkv_proj.lora_A.weight"));
  EXPECT_TRUE(names.count("blocks.1.mlp.fc2.lora_B.weight"));
  EXPECT_TRUE(names.count("token_refiner.blocks.0.attn.out_proj.lora_A.weight"));
  torch::NoGradGuard ng;
  EXPECT_TRUE(torch::equal(f.model->forward(f.in).video_logits, base));
  for (const auto& [name, t] : params)
    if (name == "blocks.1.mlp.fc1.lora_B.weight") t.fill_(0.01);
  EXPECT_GT(rel_l2(f.model->forward(f.in).video_logits, base), 1e-4);
}

// bf16 with the release's fp32 islands: the heads give float32, close to the float32 model.
TEST(H3DiT, ReleasePrecisionRunsAndStaysClose) {
  DitFixture f;
  torch::NoGradGuard ng;
  f.model->to_release_precision();
  EXPECT_EQ(f.model->video_patch_proj->weight.scalar_type(), torch::kFloat32);
  EXPECT_EQ(f.model->time_embedder->proj_out->weight.scalar_type(), torch::kFloat32);
  EXPECT_EQ(f.model->final_layer->adaln_proj->linear->weight.scalar_type(), torch::kBFloat16);
  const auto out = f.model->forward(f.in);
  EXPECT_EQ(out.video_logits.scalar_type(), torch::kFloat32);
  EXPECT_LT(rel_l2(out.video_logits, f.ref("fixture.video_logits")), 5e-2);
  EXPECT_LT(rel_l2(out.audio_logits, f.ref("fixture.audio_logits")), 5e-2);
}

}  // namespace
}  // namespace vdt
