#include <torch/torch.h>

#include "core/safetensors.h"
#include "diffusion/flow_match.h"
#include "model/config.h"
#include "model/wan_dit.h"
#include "model/weights_io.h"
#include "test_util.h"
#include "tools/parity.h"

namespace vdt {
namespace {

// The real Wan DiT: out, loss and the seven reference gradients of fixtures/wan_tiny_a within 1e-4 (fp32, CPU).
TEST(Parity, WanTinyAForwardLossAndGradients) {
  ParityConfig cfg;
  cfg.fixture = test::fixture("wan_tiny_a.safetensors");
  const auto r = run_parity(cfg);
  EXPECT_EQ(r.timestep_mode, "per_token_first_frame_zero");
  ASSERT_EQ(r.rows.size(), 9u);  // out, loss, 7 grads
  for (const auto& row : r.rows) EXPECT_LT(row.rel_l2, 1e-4) << row.name;
  EXPECT_TRUE(r.pass());
}

TEST(Parity, CliReportsEveryTensorAndExitCode) {
  auto ok = test::run_vdt("parity " + test::fixture("wan_tiny_a.safetensors"));
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("fixture.grad.blocks.1.ffn.2.weight"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("PASS"), std::string::npos);
  // An impossible tolerance fails with exit code 1.
  auto strict = test::run_vdt("parity " + test::fixture("wan_tiny_a.safetensors") + " --tol 0");
  EXPECT_EQ(strict.code, 1) << strict.output;
  // A file without fixture metadata is an error naming it.
  auto bad = test::run_vdt("parity " + test::fixture("flow_match_wan.safetensors"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("lacks 'config'"), std::string::npos) << bad.output;
}

// A fixture in the `global` timestep mode states the same loss (frames 1..) as every Wan fixture: parity scores that
// loss, not one inferred from the timestep mode. The fixture is wan_tiny_a rerun with one timestep for all tokens
// (out, loss and gradients from this port, which matches the reference at ~2e-7).
TEST(Parity, TheLossIsTheOneTheFixtureStates) {
  test::TempDir tmp;
  auto src = SafetensorsSet::open({test::fixture("wan_tiny_a.safetensors")});
  auto meta = src.metadata();
  WanDiT model(ModelConfig::from_json(meta.at("config"), "wan_tiny_a"));
  load_weights(*model, src);
  auto out = model->forward({src.get("fixture.x"), src.get("fixture.timestep"), src.get("fixture.context")});
  auto loss = flow_mse(out, src.get("fixture.target"), /*skip_first_frame=*/true);
  loss.backward();
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& k : src.keys()) {
    if (k == "fixture.out")
      tensors.emplace_back(k, out.detach().clone());
    else if (k == "fixture.loss")
      tensors.emplace_back(k, loss.detach().reshape({1}).clone());
    else
      tensors.emplace_back(k, src.get(k));
  }
  for (auto& [k, t] : tensors)
    if (k.rfind("fixture.grad.", 0) == 0) t = model->named_parameters()[k.substr(13)].grad().clone();
  meta["timestep_mode"] = "global";
  const auto path = tmp.file("wan_global.safetensors");
  save_safetensors(path, tensors, meta);
  ParityConfig cfg;
  cfg.fixture = path;
  const auto r = run_parity(cfg);
  EXPECT_EQ(r.timestep_mode, "global");
  EXPECT_EQ(r.loss, "frames 1..");
  ASSERT_EQ(r.rows.size(), 9u);
  for (const auto& row : r.rows) EXPECT_LT(row.rel_l2, 1e-5) << row.name;
  // A stated loss over all frames is scored that way (and this fixture's loss is then not matched).
  meta["loss"] = "mean over all frames of (out - target)^2";
  save_safetensors(path, tensors, meta);
  const auto all = run_parity(cfg);
  EXPECT_EQ(all.loss, "all frames");
  EXPECT_FALSE(all.pass());
  // A statement parity cannot read is an error naming the key and the value.
  meta["loss"] = "huber";
  save_safetensors(path, tensors, meta);
  test::expect_error([&] { run_parity(cfg); }, {path, "metadata 'loss'", "huber"});
}

}  // namespace
}  // namespace vdt
