// --device: the spellings every command takes (auto, cpu, cuda, cuda:N), and the device each resolves to for a given
// number of visible GPUs, local rank and world size (the GPU count is injected, so this runs on a CPU machine).
#include <torch/cuda.h>

#include "core/device_flag.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(DeviceFlag, ParsesTheFourSpellings) {
  EXPECT_EQ(parse_device_flag("auto").kind, DeviceFlag::Kind::kAuto);
  EXPECT_EQ(parse_device_flag("cpu").kind, DeviceFlag::Kind::kCpu);
  EXPECT_EQ(parse_device_flag("cuda").kind, DeviceFlag::Kind::kCuda);
  EXPECT_EQ(parse_device_flag("cuda").index, -1);
  const auto d = parse_device_flag("cuda:3");
  EXPECT_EQ(d.kind, DeviceFlag::Kind::kCuda);
  EXPECT_EQ(d.index, 3);
  EXPECT_EQ(parse_device_flag("cuda:0").index, 0);
}

TEST(DeviceFlag, AnythingElseNamesTheFlagAndTheValue) {
  for (const std::string bad :
       {"gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1a", "cuda:123456", "cuda 1", "", "mps"})
    test::expect_error([&] { parse_device_flag(bad, "--device"); },
                       {"--device '" + bad + "'", "expected auto, cpu, cuda or cuda:N"});
}

TEST(DeviceFlag, ResolvesPerVisibleGpusAndLaunch) {
  // (value, local_rank, world, visible GPUs) -> device
  EXPECT_EQ(resolve_device("cpu", 0, 1, 8, "--device"), c10::Device(c10::kCPU));
  EXPECT_EQ(resolve_device("auto", 0, 1, 0, "--device"), c10::Device(c10::kCPU));
  EXPECT_EQ(resolve_device("auto", 1, 2, 2, "--device"), c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(resolve_device("cuda", 0, 1, 1, "--device"), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(resolve_device("cuda", 3, 4, 4, "--device"), c10::Device(c10::kCUDA, 3));  // torchrun: GPU LOCAL_RANK
  EXPECT_EQ(resolve_device("cuda:1", 0, 1, 2, "--device"), c10::Device(c10::kCUDA, 1));
}

TEST(DeviceFlag, ErrorsSayWhatIsVisibleAndWhatToDo) {
  test::expect_error([&] { resolve_device("cuda", 0, 1, 0, "--device"); },
                     {"--device cuda", "no CUDA device is visible", "CUDA_VISIBLE_DEVICES", "--device cpu"});
  test::expect_error([&] { resolve_device("cuda:2", 0, 1, 0, "--device"); }, {"--device cuda:2", "no CUDA device"});
  test::expect_error([&] { resolve_device("cuda:2", 0, 1, 2, "--device"); },
                     {"--device cuda:2", "GPU 2 is not visible", "2 CUDA device(s) are visible (indices 0..1",
                      "CUDA_VISIBLE_DEVICES"});
  test::expect_error([&] { resolve_device("cuda:0", 0, 2, 2, "--device"); },
                     {"--device cuda:0", "one GPU for all 2 ranks", "use --device cuda", "LOCAL_RANK"});
  test::expect_error([&] { resolve_device("cuda", 2, 4, 2, "--device"); },
                     {"--device cuda", "LOCAL_RANK 2", "2 CUDA device(s)", "--nproc_per_node"});
  test::expect_error([&] { resolve_device("gpu:1", 0, 1, 2, "--step-device"); }, {"--step-device 'gpu:1'"});
}

TEST(DeviceFlag, ThisMachinesCount) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible; the no-GPU error cannot be shown here";
  test::expect_error([&] { resolve_device("cuda:0"); }, {"--device cuda:0", "no CUDA device is visible"});
  EXPECT_EQ(resolve_device("auto"), c10::Device(c10::kCPU));
}

}  // namespace
}  // namespace vdt
