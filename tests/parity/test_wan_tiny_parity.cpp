#include <torch/torch.h>

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

}  // namespace
}  // namespace vdt
