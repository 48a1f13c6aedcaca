#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#include "test_util.h"
#include "tools/kernel_bench.h"

namespace vdt {
namespace {

// `vdt bench kernels` on the CPU (the ATen fallback at small shapes): every op at both dtypes is checked and passes,
// and the switch is left as it was.
TEST(KernelBench, SmallShapesOnCpuPass) {
  KernelBenchConfig cfg;
  cfg.device = "cpu", cfg.shapes = "small", cfg.iters = 1, cfg.warmup = 0;
  kernels::set_fused_kernels(false);
  const auto r = run_kernel_bench(cfg);
  EXPECT_FALSE(kernels::fused_kernels_on());
  kernels::set_fused_kernels(true);
  ASSERT_EQ(r.size(), 24u);  // 12 ops x 2 dtypes
  int wan_qk = 0;
  for (const auto& k : r) {
    EXPECT_TRUE(k.pass()) << k.op << " " << k.dtype;
    EXPECT_EQ(k.backend, k.op == "fp8_linear" ? "emulate" : "aten");
    // the output and its gradients: three for most (h3_qk_norm_rope: qkv, w_q, w_k; fp8_linear: x, w, b), four for
    // wan_qk_norm_rope (q_in, k_in, w_q, w_k), two for wan_rms_norm (x, w), one for swiglu (h) and gather_rows (rows)
    wan_qk += k.op == "wan_qk_norm_rope";
    const size_t want = k.op == "wan_qk_norm_rope"                  ? 5u
                        : k.op == "wan_rms_norm"                    ? 3u
                        : k.op == "swiglu" || k.op == "gather_rows" ? 2u
                                                                    : 4u;
    EXPECT_EQ(k.tensors.size(), want) << k.op;
    EXPECT_GT(k.fused_ms, 0);
  }
  EXPECT_EQ(wan_qk, 2);
}

TEST(KernelBench, BadFlagsNameTheFlag) {
  KernelBenchConfig cfg;
  cfg.device = "cpu", cfg.dtypes = "bf16,fp8";
  EXPECT_THROW(
      {
        try {
          cfg.validate();
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("--dtypes"), std::string::npos) << e.what();
          throw;
        }
      },
      std::exception);
}

}  // namespace
}  // namespace vdt
