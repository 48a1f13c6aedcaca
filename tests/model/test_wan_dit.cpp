#include <torch/torch.h>

#include "model/attention.h"
#include "model/wan_dit.h"
#include "test_util.h"

namespace vdt {
namespace {

struct TinySetup {
  WanDiT model{preset_config("tiny")};
  torch::Tensor x = torch::randn({2, 16, 3, 4, 6});
  torch::Tensor ctx = torch::randn({2, 7, 64});
  TinySetup() {
    torch::manual_seed(0);
    model->init_weights(1);
    // Non-zero head so outputs depend on every block.
    torch::NoGradGuard ng;
    model->head->head->weight.normal_(0, 0.05);
  }
};

TEST(WanDiT, OutputShapeAndUnpatchifyChannelsFastest) {
  TinySetup s;
  auto out = s.model->forward({s.x, torch::full({2}, 500.0), s.ctx});
  EXPECT_EQ(out.sizes(), s.x.sizes());
}

// The per-frame timestep path (G = F) against the slow per-token path (G = L) of the reference.
TEST(WanDiT, PerFrameTimestepsEqualPerTokenReference) {
  TinySetup s;
  auto t_frame = torch::tensor({{0.0, 700.0, 700.0}, {0.0, 250.0, 250.0}});  // [B, F]
  const int64_t tokens_per_frame = 2 * 3;
  auto t_token = t_frame.repeat_interleave(tokens_per_frame, 1);  // [B, L]
  auto a = s.model->forward({s.x, t_frame, s.ctx});
  auto b = s.model->forward({s.x, t_token, s.ctx});
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5);
  // A global timestep equals a per-frame tensor with every frame at that value.
  auto c = s.model->forward({s.x, torch::tensor({700.0, 250.0}), s.ctx});
  auto d = s.model->forward({s.x, torch::tensor({{700.0, 700.0, 700.0}, {250.0, 250.0, 250.0}}), s.ctx});
  EXPECT_LT((c - d).abs().max().item<double>(), 1e-5);
  EXPECT_GT((a - c).abs().max().item<double>(), 1e-3);  // frame-0 timestep 0 changes the output
}

TEST(WanDiT, DistinctTimestepRowsIndexBackToT) {
  auto t = torch::tensor({{0.0, 700.0, 700.0}, {0.0, 250.0, 250.0}});  // [B, F]
  auto r = distinct_timestep_rows(t);
  EXPECT_TRUE(torch::equal(r.rows, torch::tensor({0.0f, 250.0f, 700.0f})));
  EXPECT_EQ(r.index.sizes(), t.sizes());
  EXPECT_TRUE(torch::equal(r.rows.index_select(0, r.index.flatten()).view_as(t), t.to(torch::kFloat32)));
  EXPECT_EQ(distinct_timestep_rows(torch::tensor({300.0, 300.0})).index.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_THROW(distinct_timestep_rows(torch::zeros({1, 2, 3})), std::exception);
}

// The time MLP on the distinct timesteps (SFT: frame 0 at 0 and the rest at t; causal: one per chunk) against the
// reference, one row per timestep group: the same output and the same gradients for every parameter and the input,
// to fp32 rounding.
TEST(WanDiT, DistinctTimestepRowsEqualPerGroupReference) {
  auto run = [](bool rows, const torch::Tensor& t) {
    torch::manual_seed(0);  // TinySetup's inputs are drawn before its constructor seeds
    TinySetup s;
    s.model->set_distinct_time_rows(rows);
    auto x = s.x.clone().requires_grad_(true);
    DenoiserInputs in{x, t, s.ctx};
    auto r = distinct_timestep_rows(t);
    in.t_rows = r.rows, in.t_index = r.index;
    auto out = s.model->forward(in);
    (out * torch::linspace(-1, 1, out.numel()).view_as(out)).sum().backward();
    std::map<std::string, torch::Tensor> g;
    for (auto& kv : s.model->named_parameters()) g[kv.key()] = kv.value().grad().clone();
    g["x"] = x.grad().clone();
    g["out"] = out.detach();
    return g;
  };
  for (auto t : {torch::tensor({{0.0, 700.0, 700.0}, {0.0, 250.0, 250.0}}),      // SFT: two rows per sample
                 torch::tensor({{100.0, 100.0, 900.0}, {100.0, 400.0, 400.0}}),  // chunks, one row shared by both
                 torch::tensor({350.0, 350.0})}) {                               // one timestep per sample
    auto ref = run(false, t), fast = run(true, t);
    // Not bit for bit: the CPU GEMM's result for one row depends on how many rows it is given (U vs B * G), by an
    // ulp or so; everything after the time MLP is the same computation.
    EXPECT_LT((ref["out"] - fast["out"]).abs().max().item<double>(),
              1e-6 * (1 + ref["out"].abs().max().item<double>()));
    for (auto& [k, v] : ref) {
      EXPECT_GT(v.abs().max().item<double>(), 0.0) << k;
      EXPECT_LT((v - fast[k]).abs().max().item<double>(), 1e-6 * (1 + v.abs().max().item<double>())) << k;
    }
  }
}

TEST(WanDiT, SdpaEqualsEagerAttention) {
  TinySetup s;
  auto t = torch::tensor({300.0, 900.0});
  auto a = s.model->forward({s.x, t, s.ctx});
  s.model->set_attention_kernel(AttentionKernel::eager);
  auto b = s.model->forward({s.x, t, s.ctx});
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5);
}

TEST(WanDiT, PerCellTextWithOneSharedRowEqualsSingleContext) {
  TinySetup s;
  auto t = torch::tensor({300.0, 900.0});
  auto rows = s.ctx;                                 // [R=2, Lt, text_dim]: row b for sample b
  auto ids = torch::tensor({{0, 0, 0}, {1, 1, 1}});  // [B, F]
  auto a = s.model->forward({s.x, t, s.ctx});
  auto b = s.model->forward({s.x, t, rows, ids});
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5);
  // Different text per cell changes only... at least the output of the frames whose cell changed.
  auto ids2 = torch::tensor({{0, 1, 0}, {1, 1, 1}});
  auto c = s.model->forward({s.x, t, rows, ids2});
  EXPECT_GT((c - a).abs().max().item<double>(), 1e-4);
}

TEST(WanDiT, BlockRunnerWrapsEveryBlock) {
  TinySetup s;
  int calls = 0;
  s.model->set_block_runner([&](const BlockCall& call) {
    ++calls;
    EXPECT_NE(dynamic_cast<WanBlockImpl*>(&call.block), nullptr);
    EXPECT_EQ(call.inputs.size(), 3u);  // x, e0, ctx
    return call.run(call.inputs);
  });
  s.model->forward({s.x, torch::tensor({1.0, 2.0}), s.ctx});
  EXPECT_EQ(calls, 2);
}

// The residual stream and its gradient reach every block row-major: a column-major one (the patch embedding's
// transpose) hands cuBLAS misaligned leading dimensions in backward (L % 8 != 0 -> align2 fallback kernels).
TEST(WanDiT, ResidualStreamAndItsGradientAreRowMajor) {
  TinySetup s;
  std::vector<bool> inputs, grads;
  s.model->set_block_runner([&](const BlockCall& call) {
    inputs.push_back(call.inputs[0].is_contiguous());
    auto out = call.run(call.inputs);
    out.register_hook([&](torch::Tensor g) { grads.push_back(g.is_contiguous()); });
    return out;
  });
  auto x = s.x.narrow(3, 0, 2).contiguous();  // 3 x 2 x 6 latents -> an odd token count (3 * 1 * 3 = 9)
  s.model->forward({x, torch::tensor({1.0, 2.0}), s.ctx}).square().sum().backward();
  ASSERT_EQ(inputs.size(), 2u);
  ASSERT_EQ(grads.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(inputs[i]) << "block " << i << " input";
    EXPECT_TRUE(grads[i]) << "block " << i << " output gradient";
  }
}

TEST(WanDiT, BadShapesNameWhatWasExpected) {
  TinySetup s;
  test::expect_error(
      [&] {
        s.model->forward({torch::randn({1, 5, 3, 4, 6}), torch::ones({1}), s.ctx});
      },
      {"expected x [B, 16, F, H, W]"});
  test::expect_error([&] { s.model->forward({s.x, torch::ones({2, 5}), s.ctx}); }, {"expected t"});
}

// Per-cell text as distinct rows + ids (k, v projected once per row) equals the same text spelled out per cell
// ([B, F, Lt, D]), forward and backward, with a LoRA on k and v so the row path's gradients are exercised too.
TEST(WanDiT, CrossAttentionOnDistinctRowsEqualsPerCellText) {
  torch::manual_seed(8);
  CrossAttention ca(64, 4, 1e-6);
  const int64_t B = 2, F = 3, Lt = 5, D = 64;
  auto x0 = torch::randn({B, F * 4, D}), rows0 = torch::randn({2, Lt, D});
  const auto ids = torch::tensor({{0, 1, 1}, {1, 0, 0}}, torch::kLong);  // [B, F]
  auto run = [&](bool as_rows) {
    auto x = x0.clone().requires_grad_(), rows = rows0.clone().requires_grad_();
    auto y = as_rows ? ca(x, rows, ids) : ca(x, rows.index_select(0, ids.flatten()).unflatten(0, {B, F}));
    y.pow(2).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), x.grad(), rows.grad(), ca->k->weight.grad().clone()};
  };
  const auto a = run(true);
  ca->zero_grad();
  const auto b = run(false);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-5)) << "tensor " << i;
}

}  // namespace
}  // namespace vdt

namespace vdt {
namespace {

// Resume compares architectures through the seam: the same config says nothing, another says what both are.
TEST(WanDiT, ArchitectureDifferenceNamesBothConfigs) {
  WanDiT m(preset_config("tiny"));
  EXPECT_EQ(m->architecture_difference(m->config_json()), "");
  auto other = preset_config("tiny");
  other.num_layers += 1;
  const auto d = m->architecture_difference(other.to_json());
  EXPECT_NE(d.find("saved"), std::string::npos) << d;
  EXPECT_NE(d.find(std::to_string(other.num_layers)), std::string::npos) << d;
  EXPECT_EQ(m->family(), "wan");
  EXPECT_EQ(m->block_modules().size(), static_cast<size_t>(preset_config("tiny").num_layers));
}

}  // namespace
}  // namespace vdt
