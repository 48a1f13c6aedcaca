// The collectives the trainers need (docs/design.md §6), behind one interface with three implementations: a single rank
// (identity), in-process ranks on threads (CPU tests, local_group.h) and NCCL through c10d's ProcessGroupNCCL with a
// TCPStore rendezvous from torchrun's or Slurm's environment (nccl_group.h). A world splits into groups of
// consecutive ranks (the nodes: the causal trainer shards its frozen base within each node). Every collective is
// asynchronous: it returns a Work whose wait() makes the result usable (on a GPU: orders the current stream after it).
// Not here: what is communicated (distributed/grad_sync.h, zero2.h).
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>

namespace vdt {

enum class ReduceOp { Sum, Max };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // In place over every rank's `t` (same shape, dtype and device everywhere).
  virtual WorkPtr all_reduce(torch::Tensor t, ReduceOp op = ReduceOp::Sum) = 0;
  // in: [world * n] on every rank; out: [n], this rank's slice of the elementwise sum.
  virtual WorkPtr reduce_scatter(torch::Tensor out, torch::Tensor in) = 0;
  // in: [n] on every rank; out: [world * n], rank r's `in` at [r*n, (r+1)*n).
  virtual WorkPtr all_gather(torch::Tensor out, torch::Tensor in) = 0;
  virtual WorkPtr broadcast(torch::Tensor t, int root) = 0;
  virtual void barrier() = 0;
  virtual std::string describe() const = 0;
  // Ranks per node (torchrun's LOCAL_WORLD_SIZE; ranks are numbered node by node). The world for a group of a split.
  virtual int local_world() const { return world(); }
  // Splits the world into groups of `size` consecutive ranks (size divides world()): every rank calls it together,
  // every group is created (as torch.distributed.new_group asks), and this rank gets its own group's communicator,
  // in which its rank is rank() % size. split(local_world()) gives this rank's node.
  virtual std::unique_ptr<Communicator> split(int size) = 0;
};

// World size 1: every collective is a copy or nothing.
std::unique_ptr<Communicator> make_single_rank();

// The launch environment: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or
// Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (MASTER_ADDR/PORT still from the
// environment, see docs/distributed.md). A malformed or inconsistent value is an error naming the variable.
struct LaunchEnv {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;     // torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True)
  int restart_count = 0;        // TORCHELASTIC_RESTART_COUNT
  std::string source = "none";  // "torchrun", "slurm" or "none"
  static LaunchEnv from_env();
};

// The communicator for this process: single rank when the environment names no world; NCCL on `device` otherwise
// (an error when this build has no NCCL or the device is not CUDA).
std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, const torch::Device& device);

}  // namespace vdt
