// Sample order: one global permutation per epoch, a function of (seed, epoch) only (the Python trainer's
// SeedableRandomSampler), sharded over ranks by stride, cut into micro batches with the last partial batch dropped.
// Because the permutation is global, a resume with a different world size can continue the same sample stream.
// Not here: loading, threads.
#pragma once
#include <cstdint>
#include <vector>

namespace vdt {

// A permutation of 0..n-1 that depends on (seed, epoch) only (Fisher-Yates on Philox draws).
std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

struct ShardPlan {
  int64_t n_micro;  // micro batches per rank per epoch (drop_last)
};
// Every rank gets floor(n / world) samples, so n_micro is the same on every rank.
ShardPlan shard_plan(int64_t n, int world, int64_t batch_size);

// The micro batches (lists of dataset indices) of `rank` for `epoch`: global position i of the permutation goes to
// rank i % world (positions past world * floor(n / world) are dropped), then batches of batch_size, last partial
// batch dropped. Micro batch j of every rank together covers positions [j*B*world, (j+1)*B*world).
std::vector<std::vector<int64_t>> rank_micro_batches(uint64_t seed, int64_t epoch, int64_t n, int rank, int world,
                                                     int64_t batch_size);

}  // namespace vdt
