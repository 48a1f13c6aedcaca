// What every trainer's run needs beside its model, data and update path (torchtitan's train() set-up): the device
// and compute dtype, the communicator, one host sync per step that also agrees across ranks on a stop request, the
// non-finite stop, the noise draw, peak memory and the checksum the ranks compare at the end.
// Not here: the steps themselves (each trainer's train_step), files (train/checkpoint/).
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "distributed/communicator.h"

namespace vdt {

// The step's numbers on the host after finish_step().
struct StepScalars {
  std::vector<double> mean;   // each `reduced` tensor summed over the ranks, divided by the world size
  std::vector<double> local;  // each `local` tensor, this rank's value
  bool stop = false;          // a stop signal reached some rank
};

// The MFU denominator: the H200's dense bf16 rate in TFLOP/s (docs/BENCHMARKS.md, "MFU").
constexpr double kMfuPeakTflops = 989.4;

class RunContext {
 public:
  // device_flag: auto, cpu, cuda or cuda:N (core/device_flag.h: resolve_device; errors name the flag);
  // device_index: this process's LOCAL_RANK, the GPU that `cuda` / `auto` take.
  RunContext(Communicator& comm, const std::string& device_flag, int device_index, torch::ScalarType dtype);

  Communicator& comm;
  const int rank, world;
  const torch::Device device;
  const torch::ScalarType dtype;  // compute dtype

  // Sums `values` (0-dim each) and every rank's stop request over the ranks in one all-reduce, on the device (no host
  // sync): [n + 1] float32, the last element > 0 when a stop signal reached some rank.
  torch::Tensor all_reduce_step(const std::vector<torch::Tensor>& values);
  // Whether a stop signal reached any rank (one all-reduce and a host sync; for start-up, before the first step).
  bool stop_requested_anywhere();
  // The one host sync of a step: `reduced` (from all_reduce_step) as means over the ranks, plus this rank's `local`.
  StepScalars to_host(const torch::Tensor& reduced, const std::vector<torch::Tensor>& local = {}) const;
  // Standard-normal noise like `like` (drawn in float32, then cast), from the stream (seed, purpose) at `key`:
  // the same on any device count, rank or resume.
  torch::Tensor noise(const torch::Tensor& like, uint64_t seed, uint32_t purpose, uint64_t key) const;
  // The error a non-finite loss ends a run with (every rank reaches it in the same step: the loss is reduced).
  [[noreturn]] void fail_non_finite(int64_t step, double loss, const std::string& intact,
                                    const std::string& hint) const;
  double peak_memory_gb() const;
  // Model FLOP utilisation of a step on this device: tflop_per_step / s_per_step / kMfuPeakTflops; 0 on the CPU (no
  // rate to compare with) or without a timed step.
  double mfu(double tflop_per_step, double s_per_step) const;
  // Starts the peak over (CUDA) once the run is built: the peak then reports training, not a build that briefly
  // held more (a frozen base built whole on every rank before sharding).
  void reset_peak_memory() const;
  // CRC-32 of the tensors' bytes (host copies), so the ranks can show they hold the same weights.
  static uint32_t checksum(const std::vector<torch::Tensor>& tensors);
};

// Peak memory in GiB: CUDA peak allocated on a GPU, the process's peak RSS on the CPU.
double peak_memory_gb(const torch::Device& device);
// Starts the CUDA peak over (nothing on the CPU, whose peak RSS cannot be reset).
void reset_peak_memory(const torch::Device& device);
// The most pinned host memory the CUDA host allocator has held (its allocations rounded up to powers of two: weight
// streaming's copies and the activation offload), in GiB; 0 on the CPU.
double pinned_host_gb(const torch::Device& device);

}  // namespace vdt
