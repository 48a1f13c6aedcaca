// Each collective is two barriers: ranks post their input, wait for all (1), compute their result from every input
// into a temporary, wait for all (2) so no input is overwritten while another rank reads it, then write the result.
#include "distributed/local_group.h"

#include <torch/torch.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace vdt {
namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
};

struct Shared {
  explicit Shared(int w) : world(w), slots(static_cast<size_t>(w)) {}
  const int world;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  bool aborted = false;
  std::vector<torch::Tensor> slots;
  std::map<std::pair<int64_t, int>, std::shared_ptr<Shared>> groups;  // (split call, group) -> the group's state

  void barrier() {
    std::unique_lock<std::mutex> lk(mu);
    VDT_CHECK(!aborted, "in-process ranks: another rank failed");
    const int64_t gen = generation;
    if (++arrived == world) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lk, [&] { return generation != gen || aborted; });
    VDT_CHECK(!aborted, "in-process ranks: another rank failed");
  }
  void abort() {  // and every group split from this one: their ranks may be waiting there
    std::vector<std::shared_ptr<Shared>> children;
    {
      std::lock_guard<std::mutex> lk(mu);
      aborted = true;
      for (const auto& [key, g] : groups) children.push_back(g);
      cv.notify_all();
    }
    for (auto& g : children) g->abort();
  }
};

class LocalRank : public Communicator {
 public:
  LocalRank(std::shared_ptr<Shared> s, int rank, int local_world)
      : s_(std::move(s)), rank_(rank), local_world_(local_world) {}
  int rank() const override { return rank_; }
  int world() const override { return s_->world; }
  int local_world() const override { return local_world_; }
  std::unique_ptr<Communicator> split(int size) override {
    VDT_CHECK(size >= 1 && s_->world % size == 0, "split: groups of ", size, " ranks do not divide a world of ",
              s_->world);
    const int64_t call = splits_++;  // every rank splits in the same order
    std::shared_ptr<Shared> group;
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      auto& g = s_->groups[{call, rank_ / size}];
      if (!g) g = std::make_shared<Shared>(size);
      group = g;
    }
    s_->barrier();  // every group exists before any is used
    return std::make_unique<LocalRank>(group, rank_ % size, size);
  }

  WorkPtr all_reduce(torch::Tensor t, ReduceOp op) override {
    torch::NoGradGuard ng;
    post(t);
    auto acc = s_->slots[0].clone();
    for (int r = 1; r < s_->world; ++r)
      op == ReduceOp::Sum ? acc.add_(s_->slots[r]) : acc.copy_(torch::maximum(acc, s_->slots[r]));
    s_->barrier();
    t.copy_(acc);
    return std::make_shared<DoneWork>();
  }
  WorkPtr reduce_scatter(torch::Tensor out, torch::Tensor in) override {
    torch::NoGradGuard ng;
    const int64_t n = out.numel();
    VDT_CHECK(in.numel() == n * s_->world, "reduce_scatter: input has ", in.numel(), " elements, expected ",
              n * s_->world);
    post(in);
    auto acc = s_->slots[0].narrow(0, rank_ * n, n).clone();
    for (int r = 1; r < s_->world; ++r) acc.add_(s_->slots[r].narrow(0, rank_ * n, n));
    s_->barrier();
    out.copy_(acc);
    return std::make_shared<DoneWork>();
  }
  WorkPtr all_gather(torch::Tensor out, torch::Tensor in) override {
    torch::NoGradGuard ng;
    const int64_t n = in.numel();
    VDT_CHECK(out.numel() == n * s_->world, "all_gather: output has ", out.numel(), " elements, expected ",
              n * s_->world);
    post(in);
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < s_->world; ++r) parts.push_back(s_->slots[r].reshape({-1}).clone());
    s_->barrier();
    out.copy_(torch::cat(parts).view(out.sizes()));
    return std::make_shared<DoneWork>();
  }
  WorkPtr broadcast(torch::Tensor t, int root) override {
    torch::NoGradGuard ng;
    post(t);
    auto src = s_->slots[root].clone();
    s_->barrier();
    t.copy_(src);
    return std::make_shared<DoneWork>();
  }
  void barrier() override { s_->barrier(); }
  std::string describe() const override {
    return "in-process rank " + std::to_string(rank_) + " of " + std::to_string(s_->world);
  }

 private:
  void post(const torch::Tensor& t) {
    s_->slots[rank_] = t;
    s_->barrier();
  }
  std::shared_ptr<Shared> s_;
  int rank_, local_world_;
  int64_t splits_ = 0;
};

}  // namespace

void run_local_ranks(int world, const std::function<void(Communicator&)>& fn, int local_world) {
  VDT_CHECK(world >= 1, "run_local_ranks: world ", world, ", expected >= 1");
  if (local_world == 0) local_world = world;
  VDT_CHECK(local_world >= 1 && world % local_world == 0, "run_local_ranks: ", local_world, " ranks per node do not ",
            "divide a world of ", world);
  auto shared = std::make_shared<Shared>(world);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      LocalRank comm(shared, r, local_world);
      try {
        fn(comm);
      } catch (...) {
        errors[r] = std::current_exception();
        shared->abort();
      }
    });
  for (auto& t : threads) t.join();
  // The first real error, not the "another rank failed" that it caused elsewhere.
  std::exception_ptr first;
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      if (std::string(ex.what()).find("another rank failed") == std::string::npos) std::rethrow_exception(e);
      if (!first) first = e;
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace vdt
