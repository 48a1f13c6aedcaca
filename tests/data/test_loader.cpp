// Loader: identical batches for any worker count, in order; skip resumes at the exact next batch; a worker's error
// reaches next() with its message; the end of an epoch is nullopt.
#include <gtest/gtest.h>

#include "data/loader.h"
#include "data/sampler.h"
#include "data_test_util.h"

namespace vdt {
namespace {

using test::expect_error;
using test::TinyRoot;

std::shared_ptr<const SftDataset> noisy_dataset(const TinyRoot& t) {
  auto cfg = t.config();
  cfg.include_dropped = true;  // 5 train clips
  cfg.text_dropout = 0.5, cfg.cond_dropout = 0.3, cfg.mask_p = 0.8, cfg.seed = 5;
  return std::make_shared<const SftDataset>(cfg);
}

std::vector<SftBatch> drain(Loader& loader) {
  std::vector<SftBatch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

void expect_same(const SftBatch& a, const SftBatch& b) {
  EXPECT_EQ(a.clip_ids, b.clip_ids);
  EXPECT_TRUE(torch::equal(a.latents, b.latents));
  EXPECT_TRUE(torch::equal(a.ids, b.ids));
  EXPECT_TRUE(torch::equal(a.context, b.context));
  EXPECT_TRUE(torch::equal(a.context_ids, b.context_ids));
  EXPECT_TRUE(torch::equal(a.text_drop, b.text_drop));
  EXPECT_TRUE(torch::equal(a.cond_drop, b.cond_drop));
  EXPECT_TRUE(torch::equal(a.mask_frac, b.mask_frac));
}

TEST(Loader, SameBatchesForAnyWorkerCount) {
  TinyRoot t;
  const auto ds = noisy_dataset(t);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto micro = rank_micro_batches(5, epoch, static_cast<int64_t>(ds->size()), 0, 1, 1);
    std::vector<std::vector<SftBatch>> runs;
    for (const int workers : {0, 1, 3}) {
      Loader loader(ds, 1, workers, workers == 3 ? 1 : 2);
      loader.start_epoch(epoch, micro);
      runs.push_back(drain(loader));
      EXPECT_FALSE(loader.next().has_value());
    }
    ASSERT_EQ(runs[0].size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(runs[0][k].clip_ids[0], ds->clip_ids()[micro[k][0]]);
      expect_same(runs[0][k], runs[1][k]);
      expect_same(runs[0][k], runs[2][k]);
      // The loader's batch is the dataset's sample for (seed, epoch, index).
      const auto s = ds->get(static_cast<size_t>(micro[k][0]), epoch);
      EXPECT_TRUE(torch::equal(runs[0][k].ids[0], s.ids));
    }
  }
}

TEST(Loader, SkipResumesAtTheExactNextBatch) {
  TinyRoot t;
  const auto ds = noisy_dataset(t);
  const auto micro = rank_micro_batches(5, 1, static_cast<int64_t>(ds->size()), 0, 1, 2);  // 2 batches of 2
  Loader full(ds, 2, 2);
  full.start_epoch(1, micro);
  const auto all = drain(full);
  ASSERT_EQ(all.size(), 2u);
  Loader resumed(ds, 2, 2);
  resumed.start_epoch(1, micro, 1);
  const auto rest = drain(resumed);
  ASSERT_EQ(rest.size(), 1u);
  expect_same(rest[0], all[1]);
  // Restarting an epoch while batches are in flight, then a different epoch, on the same loader.
  full.start_epoch(1, micro);
  ASSERT_TRUE(full.next().has_value());
  full.start_epoch(2, rank_micro_batches(5, 2, 5, 0, 1, 2));
  EXPECT_EQ(drain(full).size(), 2u);
  EXPECT_GE(full.last_wait_seconds(), 0.0);
  expect_error([&] { full.start_epoch(0, micro, 3); }, {"skip 3"});
}

TEST(Loader, RethrowsWorkerErrorWithItsMessage) {
  TinyRoot t;
  const auto ds = noisy_dataset(t);
  auto bad = TinyRoot::ids_for(2);
  bad[1][0][0] = 99;
  t.write_ids("t2", bad);  // after construction: only loading sees it
  const std::vector<std::vector<int64_t>> micro = {{0}, {1}, {2}, {3}};
  for (const int workers : {0, 2}) {
    Loader loader(ds, 1, workers);
    loader.start_epoch(0, micro);
    EXPECT_TRUE(loader.next().has_value());
    EXPECT_TRUE(loader.next().has_value());
    expect_error([&] { loader.next(); }, {t.cond("t2"), "frame 1", "id 99"});
  }
}

}  // namespace
}  // namespace vdt
