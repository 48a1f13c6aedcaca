// Epoch permutation (Fisher-Yates whose j-th swap is the Philox draw (epoch, j)) and rank sharding.
#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "core/rng_purposes.h"

namespace vdt {

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  VDT_CHECK(n >= 0 && epoch >= 0, "epoch_permutation: n ", n, " and epoch ", epoch, " must be >= 0");
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  const RngStream rng(seed, rng_purpose::kPermutation);
  for (int64_t j = n - 1; j > 0; --j) {
    const auto k = static_cast<int64_t>(rng.uniform(static_cast<uint64_t>(epoch), static_cast<uint32_t>(j)) *
                                        static_cast<double>(j + 1));
    std::swap(p[j], p[std::min(k, j)]);
  }
  return p;
}

ShardPlan shard_plan(int64_t n, int world, int64_t batch_size) {
  VDT_CHECK(world >= 1, "world size ", world, ", expected >= 1");
  VDT_CHECK(batch_size >= 1, "--batch_size: ", batch_size, ", expected >= 1");
  return {n / world / batch_size};
}

std::vector<std::vector<int64_t>> rank_micro_batches(uint64_t seed, int64_t epoch, int64_t n, int rank, int world,
                                                     int64_t batch_size) {
  VDT_CHECK(rank >= 0 && rank < world, "rank ", rank, " outside world size ", world);
  const int64_t n_micro = shard_plan(n, world, batch_size).n_micro;
  const auto perm = epoch_permutation(seed, epoch, n);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(n_micro));
  for (int64_t j = 0; j < n_micro; ++j)
    for (int64_t b = 0; b < batch_size; ++b) out[j].push_back(perm[(j * batch_size + b) * world + rank]);
  return out;
}

}  // namespace vdt
