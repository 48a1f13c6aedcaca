#include <torch/torch.h>

#include "core/rng.h"
#include "test_util.h"

namespace vdt {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(RngStream, DrawsDependOnlyOnKeyAndCounters) {
  RngStream a(7, 1), b(7, 1), other_purpose(7, 2), other_seed(8, 1);
  EXPECT_EQ(a.uniform(3, 4, 0), b.uniform(3, 4, 0));
  EXPECT_NE(a.uniform(3, 4, 0), a.uniform(3, 5, 0));
  EXPECT_NE(a.uniform(3, 4, 0), a.uniform(3, 4, 1));
  EXPECT_NE(a.uniform(3, 4, 0), other_purpose.uniform(3, 4, 0));
  EXPECT_NE(a.uniform(3, 4, 0), other_seed.uniform(3, 4, 0));
  // Uniform on [0, 1): mean and bounds over many draws.
  double sum = 0;
  for (uint32_t i = 0; i < 20000; ++i) {
    const double u = a.uniform(i, 0, 0);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 20000, 0.5, 0.01);
}

TEST(RngStream, TorchGeneratorsAreReproducibleAndIndependentOfGlobalState) {
  auto g1 = make_generator(torch::kCPU, 42);
  auto x = torch::randn({8}, g1);
  torch::manual_seed(1234);
  auto g2 = make_generator(torch::kCPU, 42);
  EXPECT_TRUE(torch::equal(x, torch::randn({8}, g2)));
}

}  // namespace
}  // namespace vdt
