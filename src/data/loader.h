// Batch loader: a pool of worker threads that assembles micro batches (get + collate + pin) ahead of the consumer,
// at most prefetch x num_workers in flight, handed out strictly in order. Each sample's draws depend on
// (seed, epoch, index) only, so batches are identical for any num_workers (0 = load in next() itself).
// Not here: ordering (sampler.h), device copies.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/sft_dataset.h"

namespace vdt {

class Loader {
 public:
  Loader(std::shared_ptr<const SftDataset> ds, int64_t batch_size, int num_workers, int prefetch = 2,
         bool pin_memory = true);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts an epoch over the given micro batches, skipping the first `skip` of them (resume). Stops any epoch in
  // flight.
  void start_epoch(int64_t epoch, std::vector<std::vector<int64_t>> micro_batches, int64_t skip = 0);
  // The next batch; nullopt at the end of the epoch; rethrows a worker's error with its message.
  std::optional<SftBatch> next();
  // Seconds the last next() call blocked waiting for a batch (data_time).
  double last_wait_seconds() const { return last_wait_; }

 private:
  struct Result {
    std::optional<SftBatch> batch;
    std::exception_ptr error;
  };
  SftBatch build(int64_t k) const;
  void worker_loop();
  void stop_workers();

  std::shared_ptr<const SftDataset> ds_;
  int64_t batch_size_;
  int num_workers_, prefetch_;
  bool pin_memory_;

  int64_t epoch_ = 0;
  std::vector<std::vector<int64_t>> batches_;
  int64_t cursor_ = 0;    // next batch next() hands out
  int64_t next_job_ = 0;  // next batch a worker takes
  bool stop_ = false;
  std::map<int64_t, Result> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  double last_wait_ = 0;
};

}  // namespace vdt
