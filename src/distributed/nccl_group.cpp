#include "distributed/nccl_group.h"

#include "core/error.h"

#ifdef VDT_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#endif

namespace vdt {

#ifdef VDT_WITH_NCCL
namespace {

class NcclWork : public Work {
 public:
  explicit NcclWork(c10::intrusive_ptr<c10d::Work> w) : w_(std::move(w)) {}
  void wait() override { w_->wait(); }

 private:
  c10::intrusive_ptr<c10d::Work> w_;
};

class NcclGroup : public Communicator {
 public:
  NcclGroup(const LaunchEnv& env, const torch::Device& device) : env_(env) {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device.index() < 0 ? env.local_rank : device.index()));
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = !env.agent_store && env.rank == 0;
    so.numWorkers = env.world;
    so.timeout = std::chrono::minutes(10);
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    if (env.agent_store)  // as torch.distributed's env:// rendezvous does under torchrun
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
    store_ = store;
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world, options());
  }
  // A group of a split: its own ProcessGroupNCCL over the world's store under the group's prefix.
  NcclGroup(const LaunchEnv& env, c10::intrusive_ptr<c10d::Store> store, const std::string& prefix)
      : env_(env), store_(c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store))) {
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, env.rank, env.world, options());
  }
  ~NcclGroup() override {
    try {  // torch.distributed's destroy_process_group: finish pending work, release the communicators
      pg_->shutdown();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[dist] NCCL shutdown: %s\n", e.what());
    }
  }
  int rank() const override { return env_.rank; }
  int world() const override { return env_.world; }
  int local_world() const override { return env_.local_world; }
  std::unique_ptr<Communicator> split(int size) override {
    VDT_CHECK(size >= 1 && env_.world % size == 0, "split: groups of ", size, " ranks do not divide a world of ",
              env_.world);
    const int call = splits_++;
    std::unique_ptr<Communicator> mine;
    for (int g = 0; g < env_.world / size; ++g) {  // every rank walks every group; its members create it
      if (env_.rank / size != g) continue;
      LaunchEnv ge = env_;
      ge.rank = env_.rank % size, ge.world = size, ge.local_world = std::min(env_.local_world, size);
      mine = std::make_unique<NcclGroup>(ge, store_, "split" + std::to_string(call) + "/group" + std::to_string(g));
    }
    barrier();
    return mine;
  }
  WorkPtr all_reduce(torch::Tensor t, ReduceOp op) override {
    std::vector<at::Tensor> ts = {t};
    c10d::AllreduceOptions o;
    o.reduceOp = op == ReduceOp::Sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    return std::make_shared<NcclWork>(pg_->allreduce(ts, o));
  }
  WorkPtr reduce_scatter(torch::Tensor out, torch::Tensor in) override {
    return std::make_shared<NcclWork>(pg_->_reduce_scatter_base(out, in));
  }
  WorkPtr all_gather(torch::Tensor out, torch::Tensor in) override {
    return std::make_shared<NcclWork>(pg_->_allgather_base(out, in));
  }
  WorkPtr broadcast(torch::Tensor t, int root) override {
    std::vector<at::Tensor> ts = {t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    return std::make_shared<NcclWork>(pg_->broadcast(ts, o));
  }
  void barrier() override { pg_->barrier()->wait(); }
  std::string describe() const override {
    return "NCCL rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world) + " (" + env_.source +
           ", local " + std::to_string(env_.local_rank) + "/" + std::to_string(env_.local_world) + ", store " +
           env_.master_addr + ":" + std::to_string(env_.master_port) + ")";
  }

 private:
  static c10::intrusive_ptr<c10d::ProcessGroupNCCL::Options> options() {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::minutes(30);
    return opts;
  }
  LaunchEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  int splits_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_group(const LaunchEnv& env, const torch::Device& device) {
  return std::make_unique<NcclGroup>(env, device);
}
#else
std::unique_ptr<Communicator> make_nccl_group(const LaunchEnv& env, const torch::Device&) {
  VDT_FAIL("WORLD_SIZE=", env.world, ": this vdt was built without NCCL (LibTorch without CUDA/NCCL)\n",
           "---> HINT: build against a CUDA LibTorch (the PyPI wheel torch==2.11.0 has NCCL)");
}
#endif

}  // namespace vdt
