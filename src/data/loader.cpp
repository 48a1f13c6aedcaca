// Loader: workers claim batch positions in order from a shared cursor (bounded by the prefetch window ahead of the
// consumer) and deposit finished batches by position; next() waits for its position only, so order and content
// never depend on which worker built a batch. Threads live for one epoch (start_epoch stops the previous ones).
#include "data/loader.h"

#include <chrono>

#include "core/error.h"

namespace vdt {

Loader::Loader(std::shared_ptr<const SftDataset> ds, int64_t batch_size, int num_workers, int prefetch, bool pin_memory)
    : ds_(std::move(ds)),
      batch_size_(batch_size),
      num_workers_(num_workers),
      prefetch_(prefetch),
      pin_memory_(pin_memory) {
  VDT_CHECK(ds_, "Loader: no dataset");
  VDT_CHECK(batch_size_ >= 1, "--batch_size: ", batch_size_, ", expected >= 1");
  VDT_CHECK(num_workers_ >= 0, "--num_workers: ", num_workers_, ", expected >= 0");
  VDT_CHECK(prefetch_ >= 1, "Loader: prefetch ", prefetch_, ", expected >= 1");
}

Loader::~Loader() { stop_workers(); }

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void Loader::start_epoch(int64_t epoch, std::vector<std::vector<int64_t>> micro_batches, int64_t skip) {
  stop_workers();
  const int64_t n = static_cast<int64_t>(micro_batches.size());
  VDT_CHECK(skip >= 0 && skip <= n, "Loader: skip ", skip, " outside the epoch's ", n, " micro batches");
  for (const auto& mb : micro_batches)
    for (const int64_t i : mb)
      VDT_CHECK(i >= 0 && i < static_cast<int64_t>(ds_->size()), "Loader: dataset index ", i, " out of range [0, ",
                ds_->size(), ")");
  for (const auto& mb : micro_batches)
    VDT_CHECK(!mb.empty() && static_cast<int64_t>(mb.size()) <= batch_size_, "Loader: a micro batch of ", mb.size(),
              " samples, expected 1..", batch_size_);
  epoch_ = epoch;
  batches_ = std::move(micro_batches);
  cursor_ = next_job_ = skip;
  done_.clear();
  stop_ = false;
  for (int w = 0; w < num_workers_; ++w) workers_.emplace_back([this] { worker_loop(); });
}

SftBatch Loader::build(int64_t k) const {
  std::vector<SftSample> samples;
  for (const int64_t i : batches_[k]) samples.push_back(ds_->get(static_cast<size_t>(i), epoch_));
  SftBatch b = collate(samples, *ds_->text_table());
  return pin_memory_ ? b.pin_memory() : b;
}

void Loader::worker_loop() {
  const int64_t window = static_cast<int64_t>(prefetch_) * num_workers_;
  const int64_t n = static_cast<int64_t>(batches_.size());
  for (;;) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || next_job_ >= n || next_job_ < cursor_ + window; });
      if (stop_ || next_job_ >= n) return;
      k = next_job_++;
    }
    Result r;
    try {
      r.batch = build(k);
    } catch (...) {
      r.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.emplace(k, std::move(r));
    }
    cv_.notify_all();
  }
}

std::optional<SftBatch> Loader::next() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(batches_.size());
  if (cursor_ >= n) {
    last_wait_ = 0;
    return std::nullopt;
  }
  Result r;
  if (num_workers_ == 0) {
    try {
      r.batch = build(cursor_);
    } catch (...) {
      r.error = std::current_exception();
    }
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.count(cursor_) != 0; });
    auto it = done_.find(cursor_);
    r = std::move(it->second);
    done_.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++cursor_;
  }
  cv_.notify_all();  // the window moved: a worker may claim the next position
  last_wait_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.error) std::rethrow_exception(r.error);
  return std::move(r.batch);
}

}  // namespace vdt
