// Every command with --device takes cuda:N and names the flag on a bad value or a GPU it cannot see (the device
// parsing itself: tests/core/test_device_flag.cpp). On a machine with a GPU the "not visible" cases use an index past
// the visible count instead.
#include <torch/cuda.h>

#include "test_util.h"
#include "train/causal/causal_config.h"
#include "train/sft/sft_config.h"
#include "tools/step_bench.h"

namespace vdt {
namespace {

TEST(DeviceFlags, ConfigsAcceptCudaNAndNameTheFlag) {
  SftConfig s;
  s.random_init = true, s.data_root = "d", s.output = "o";
  CausalConfig c;
  c.random_init = true, c.data_root = "d", c.out = "o";
  for (const std::string ok : {"auto", "cpu", "cuda", "cuda:1"}) {
    s.compute.device = c.compute.device = ok;
    s.validate();
    c.validate();
  }
  s.compute.device = c.compute.device = "cuda:one";
  test::expect_error([&] { s.validate(); }, {"--device 'cuda:one'", "cuda:N"});
  test::expect_error([&] { c.validate(); }, {"--device 'cuda:one'", "cuda:N"});
}

TEST(DeviceFlags, EveryCommandNamesTheGpuItCannotSee) {
  const std::string gpu = "cuda:" + std::to_string(torch::cuda::device_count());  // one past the visible GPUs
  const std::string why = torch::cuda::is_available() ? "is not visible" : "no CUDA device is visible";
  test::TempDir d;
  for (const std::string& args :
       {"train sft --data_root /nonexistent --output " + d.file("s") + " --random-init --device " + gpu,
        "train causal --data_root /nonexistent --out " + d.file("c") +
            " --random-init --lora-rank 4 --save_every 2 --device " + gpu,
        "sample --ckpt " + std::string(VDT_BINARY) + " --data_root /nonexistent --out " + d.file("o") + " --device " +
            gpu,
        "bench step --trainer sft --model tiny --device " + gpu,
        "parity " + test::fixture("wan_tiny_a.safetensors") + " --device " + gpu}) {
    const auto r = test::run_vdt(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.output.find("--device " + gpu + ": "), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << args << "\n" << r.output;
  }
  const auto bad = test::run_vdt("sample --ckpt " + std::string(VDT_BINARY) + " --data_root x --out " + d.file("o") +
                                 " --device gpu0");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--device 'gpu0': expected auto, cpu, cuda or cuda:N"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace vdt
