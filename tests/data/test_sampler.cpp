// Sampler: the epoch permutation is a function of (seed, epoch); rank shards partition its kept prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/sampler.h"

namespace vdt {
namespace {

TEST(Sampler, PermutationIsFunctionOfSeedAndEpoch) {
  const auto p = epoch_permutation(3, 5, 100);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(p, epoch_permutation(3, 5, 100));
  EXPECT_NE(p, epoch_permutation(3, 6, 100));
  EXPECT_NE(p, epoch_permutation(4, 5, 100));
  // Not the identity, and every position is reachable (a crude uniformity check over many epochs).
  std::vector<int> first(10, 0);
  for (int64_t e = 0; e < 2000; ++e) ++first[epoch_permutation(0, e, 10)[0]];
  for (int c : first) EXPECT_NEAR(c, 200, 60);
  EXPECT_TRUE(epoch_permutation(0, 0, 0).empty());
  EXPECT_EQ(epoch_permutation(0, 0, 1), std::vector<int64_t>{0});
}

TEST(Sampler, RankShardsPartitionThePermutation) {
  const int64_t n = 23, batch = 2;
  const int world = 3;
  EXPECT_EQ(shard_plan(n, world, batch).n_micro, 3);  // floor(23 / 3) = 7 samples per rank -> 3 batches of 2
  const auto perm = epoch_permutation(9, 2, n);
  std::vector<std::vector<std::vector<int64_t>>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(rank_micro_batches(9, 2, n, r, world, batch));
  std::multiset<int64_t> seen;
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(ranks[r].size(), 3u);
    for (int64_t j = 0; j < 3; ++j) {
      ASSERT_EQ(ranks[r][j].size(), 2u);
      for (int64_t b = 0; b < batch; ++b) {
        EXPECT_EQ(ranks[r][j][b], perm[(j * batch + b) * world + r]);
        seen.insert(ranks[r][j][b]);
      }
    }
  }
  // Together the ranks consume exactly the first world * n_micro * batch positions, each once.
  const std::multiset<int64_t> want(perm.begin(), perm.begin() + 18);
  EXPECT_EQ(seen, want);
  // One rank is the whole (truncated) permutation in order.
  const auto one = rank_micro_batches(9, 2, n, 0, 1, 5);
  ASSERT_EQ(one.size(), 4u);
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_EQ(one[j], std::vector<int64_t>(perm.begin() + j * 5, perm.begin() + j * 5 + 5));
  EXPECT_THROW(rank_micro_batches(9, 2, n, 3, 3, 2), std::exception);
  EXPECT_THROW(shard_plan(n, 1, 0), std::exception);
}

}  // namespace
}  // namespace vdt
