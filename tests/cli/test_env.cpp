// `vdt env` end to end through the binary: the text for people and the --json for tools agree with what this test
// process sees (LibTorch's version, the GPUs, whether vdt's kernels are built, the commit of `vdt --version`), name
// the cache a user set, and list vdt's environment variables but not unrelated ones.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/headeronly/version.h>

#include <nlohmann/json.hpp>

#include "model/kernels/fused_ops.h"
#include "test_util.h"

namespace vdt {
namespace {

// `vdt env --json` with two variables set; stdout only, so that library warnings on stderr cannot break the JSON.
test::RunResult run_env_json(const std::string& cache) {
  return test::run_command("env VDT_CACHE='" + cache + "' VDT_ENV_TEST_PROBE=42 " + VDT_BINARY + " env --json");
}

TEST(EnvCommand, JsonSaysWhatThisBuildAndMachineHave) {
  test::TempDir d;
  const auto r = run_env_json(d.file("cache"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto version = test::run_vdt("--version");
  EXPECT_NE(version.output.find(j["vdt"]["commit"].get<std::string>()), std::string::npos) << version.output;
  EXPECT_EQ(j["libtorch"]["version"], TORCH_VERSION);
  EXPECT_EQ(j["vdt"]["cuda_kernels"].get<bool>(), kernels::cuda_kernels_built());
  const size_t gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  ASSERT_EQ(j["gpus"].size(), gpus);
  for (const auto& g : j["gpus"]) {
    EXPECT_GT(g.value("memory_gib", 0.0), 0.0) << g.dump();
    EXPECT_TRUE(g.contains("compute_capability") && g.contains("vdt_kernels") && g.contains("fp8")) << g.dump();
  }
  EXPECT_EQ(j["paths"]["cache"], d.file("cache"));
  EXPECT_EQ(j["env"]["VDT_ENV_TEST_PROBE"], "42");
  EXPECT_FALSE(j["env"].contains("HOME"));
  EXPECT_GT(j["host"]["cpus"].get<int64_t>(), 0);
}

TEST(EnvCommand, TextNamesEachPart) {
  const auto r = test::run_vdt("env");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* s : {"vdt        ", "libtorch   " TORCH_VERSION, "cuda       runtime ",
                        "kernels    vdt's CUDA kernels", "cache      ", "python     package "})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.output;
  EXPECT_NE(r.output.find(torch::cuda::is_available() ? "compute capability" : "gpus       none visible"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace vdt
