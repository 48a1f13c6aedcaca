#include "distributed/communicator.h"

#include <torch/torch.h>

#include <cstdlib>

#include "core/error.h"
#include "distributed/nccl_group.h"

namespace vdt {
namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
};

class SingleRank : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  WorkPtr all_reduce(torch::Tensor, ReduceOp) override { return std::make_shared<DoneWork>(); }
  WorkPtr reduce_scatter(torch::Tensor out, torch::Tensor in) override {
    out.copy_(in);
    return std::make_shared<DoneWork>();
  }
  WorkPtr all_gather(torch::Tensor out, torch::Tensor in) override {
    out.copy_(in);
    return std::make_shared<DoneWork>();
  }
  WorkPtr broadcast(torch::Tensor, int) override { return std::make_shared<DoneWork>(); }
  void barrier() override {}
  std::string describe() const override { return "single rank"; }
  std::unique_ptr<Communicator> split(int size) override {
    VDT_CHECK(size == 1, "split: groups of ", size, " ranks in a world of 1");
    return std::make_unique<SingleRank>();
  }
};

int env_int(const char* name, int fallback, bool* found = nullptr) {
  const char* s = std::getenv(name);
  if (found) *found = s != nullptr;
  if (!s) return fallback;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  VDT_CHECK(end != s && *end == '\0' && v >= 0, "environment variable ", name, "='", s,
            "' is not a non-negative integer");
  return static_cast<int>(v);
}

}  // namespace

std::unique_ptr<Communicator> make_single_rank() { return std::make_unique<SingleRank>(); }

LaunchEnv LaunchEnv::from_env() {
  LaunchEnv e;
  bool torchrun = false, slurm = false;
  env_int("WORLD_SIZE", 1, &torchrun);
  env_int("SLURM_NTASKS", 1, &slurm);
  if (torchrun) {
    e.source = "torchrun";
    e.rank = env_int("RANK", 0), e.world = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", 0), e.local_world = env_int("LOCAL_WORLD_SIZE", 1);
  } else if (slurm && env_int("SLURM_NTASKS", 1) > 1) {
    e.source = "slurm";
    e.rank = env_int("SLURM_PROCID", 0), e.world = env_int("SLURM_NTASKS", 1);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    // SLURM_NTASKS_PER_NODE may read "4" or "4(x2)"; the leading number is the tasks on this node.
    const char* tpn = std::getenv("SLURM_NTASKS_PER_NODE");
    e.local_world = tpn ? std::atoi(tpn) : 1;
  }
  if (const char* a = std::getenv("MASTER_ADDR")) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", 29500);
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent && std::string(agent) == "True";
  e.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  VDT_CHECK(e.world >= 1 && e.rank < e.world, "launch environment (", e.source, "): rank ", e.rank,
            " is not below the world size ", e.world);
  VDT_CHECK(e.local_world >= 1 && e.local_rank < e.local_world, "launch environment (", e.source, "): local rank ",
            e.local_rank, " is not below the local world size ", e.local_world);
  return e;
}

std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, const torch::Device& device) {
  if (env.world == 1) return make_single_rank();
  VDT_CHECK(device.is_cuda(), "WORLD_SIZE=", env.world, " (", env.source,
            "): multi-process training runs over NCCL and needs --device cuda\n"
            "---> HINT: on the CPU, in-process ranks are used by the tests only");
  return make_nccl_group(env, device);
}

}  // namespace vdt
