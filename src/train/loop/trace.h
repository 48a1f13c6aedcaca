// A PyTorch-profiler (Kineto) trace of one training step, for benchmarking: with VDT_TRACE=<file.json> and
// VDT_TRACE_STEP=<n> in the environment, the trainers record CPU ops and CUDA kernels of step n and write the chrome
// trace that PyTorch's profiler writes (Perfetto / chrome://tracing; benchmarks/trace_top.py sums kernel time by
// name). VDT_MEMORY_SNAPSHOT=<file.pickle> (CUDA builds) also records the caching allocator's history over that step
// and writes the snapshot PyTorch's memory viz reads (pytorch.org/memory_viz). Not a timed test: a trace slows the
// step it records. Under several ranks each rank writes its own files: `.rank<R>` before the extension (trace.json ->
// trace.rank1.json).
#pragma once
#include <memory>
#include <string>

namespace vdt {

// `path` for `rank` of `world` ranks: unchanged for one rank, else `.rank<R>` inserted before the extension.
std::string rank_file(const std::string& path, int rank, int world);

class StepTrace {
 public:
  StepTrace(int rank = 0, int world = 1);  // reads the environment; inactive when unset
  // Starts recording when `step` (1-based) is the traced one; stops and writes the file after it.
  void before_step(int64_t step);
  void after_step(int64_t step);
  // Whether `step` is recorded (its time is the profiler's as much as its own).
  bool traces(int64_t step) const { return (!path_.empty() || !snapshot_path_.empty()) && step == step_; }

 private:
  std::string path_, snapshot_path_;
  int64_t step_ = 0;
  bool on_ = false, snapshot_on_ = false;
};

}  // namespace vdt
