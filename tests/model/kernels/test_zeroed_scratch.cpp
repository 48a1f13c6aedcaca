// ZeroedScratch: small zero buffers carved from zeroed blocks (the FP8 passes' column maxima).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "model/kernels/zeroed_scratch.h"
#include "test_util.h"

namespace vdt::kernels {
namespace zeroed_scratch_test {  // named: unity batches compile several test files as one unit

TEST(ZeroedScratch, HandsOutZerosThatDoNotOverlapWithOneFillABlock) {
  ZeroedScratch scratch(1024);
  const torch::Device cpu(torch::kCPU);
  std::vector<torch::Tensor> taken;
  for (const int64_t n : {3072 / 8, 5, 16, 17, 200}) {  // 384 + 16 + 16 + 32 + 208 = 656 of 1024 (rounded to 16)
    auto t = scratch.take(n, cpu);
    ASSERT_EQ(t.sizes(), torch::IntArrayRef({n}));
    EXPECT_EQ(t.scalar_type(), torch::kInt32);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n;  // 16-byte vector loads
    EXPECT_EQ(t.count_nonzero().item<int64_t>(), 0) << n;
    t.fill_(static_cast<int>(n));  // a kernel's maxima: must not reach another buffer
    taken.push_back(t);
  }
  EXPECT_EQ(scratch.fills(), 1);
  for (const auto& t : taken) EXPECT_TRUE((t == t[0].item<int>()).all().item<bool>());
  // the block runs out: a new one (one more fill), still zeros; the old buffers keep theirs
  const auto next = scratch.take(400, cpu);
  EXPECT_EQ(scratch.fills(), 2);
  EXPECT_EQ(next.count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(taken[0][0].item<int>(), 384);
  // larger than a block: its own zeros
  const auto big = scratch.take(5000, cpu);
  EXPECT_EQ(big.size(0), 5000);
  EXPECT_EQ(big.count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(scratch.fills(), 3);
  // float32 maxima view the same zeros
  const auto f = scratch.take(8, cpu).view(torch::kFloat32);
  EXPECT_TRUE(torch::equal(f, torch::zeros({8})));
  EXPECT_THROW(scratch.take(-1, cpu), std::exception);
}

}  // namespace zeroed_scratch_test
}  // namespace vdt::kernels
