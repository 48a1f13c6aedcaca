#include "train/loop/trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#ifdef VDT_WITH_TORCH_CUDA
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace vdt {
namespace {
namespace prof = torch::profiler::impl;

void sync_devices() {
  if (torch::cuda::is_available()) torch::cuda::synchronize();
}

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}
}  // namespace

std::string rank_file(const std::string& path, int rank, int world) {
  if (world <= 1) return path;
  std::filesystem::path p(path);  // stem / extension: a hidden file's leading dot is no extension
  p.replace_filename(p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string());
  return p.string();
}

StepTrace::StepTrace(int rank, int world) {
  const char* path = std::getenv("VDT_TRACE");
  const char* step = std::getenv("VDT_TRACE_STEP");
  const char* snapshot = std::getenv("VDT_MEMORY_SNAPSHOT");
  if (snapshot && *snapshot) snapshot_path_ = rank_file(snapshot, rank, world);
  if ((!path || !*path) && snapshot_path_.empty()) return;
  if (path && *path) path_ = rank_file(path, rank, world);
  try {
    step_ = step ? std::stoll(step) : 3;
  } catch (...) {
    VDT_FAIL("VDT_TRACE_STEP='", step, "': expected a step number");
  }
}

void StepTrace::before_step(int64_t step) {
  if (step != step_) return;
  sync_devices();
  if (!snapshot_path_.empty()) {
#ifdef VDT_WITH_TORCH_CUDA
    const char* stacks = std::getenv("VDT_MEMORY_STACKS");  // "cpp" (slow to symbolise) or "python" (none from C++)
    torch::cuda::_record_memory_history(std::optional<std::string>("all"), std::optional<std::string>("all"),
                                        std::string(stacks && *stacks ? stacks : "python"), size_t{2000000});
    snapshot_on_ = true;
#else
    VDT_FAIL("VDT_MEMORY_SNAPSHOT needs a LibTorch with CUDA (this build has none)");
#endif
  }
  if (path_.empty()) return;
  // Input shapes (which op handed a GEMM which operands) and, with VDT_TRACE_MEMORY=1, every allocation with the
  // running total (where the step's peak is; benchmarks/trace_ops.py reads both).
  const prof::ProfilerConfig cfg(prof::ProfilerState::KINETO, /*report_input_shapes=*/true,
                                 /*profile_memory=*/env_on("VDT_TRACE_MEMORY"));
  std::set<prof::ActivityType> acts{prof::ActivityType::CPU};
  if (torch::cuda::is_available()) acts.insert(prof::ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(cfg, acts);
  torch::autograd::profiler::enableProfiler(cfg, acts);
  on_ = true;
}

void StepTrace::after_step(int64_t step) {
  if (step != step_) return;
  sync_devices();
#ifdef VDT_WITH_TORCH_CUDA
  if (snapshot_on_) {
    const std::string pickled = torch::cuda::_memory_snapshot_pickled();
    std::FILE* f = std::fopen(snapshot_path_.c_str(), "wb");
    VDT_CHECK(f, "VDT_MEMORY_SNAPSHOT=", snapshot_path_, ": cannot write there");
    std::fwrite(pickled.data(), 1, pickled.size(), f);
    std::fclose(f);
    torch::cuda::_record_memory_history(std::optional<std::string>(), std::optional<std::string>());
    snapshot_on_ = false;
    std::printf("[trace] memory of step %lld -> %s\n", static_cast<long long>(step), snapshot_path_.c_str());
  }
#endif
  if (!on_) return;
  auto result = torch::autograd::profiler::disableProfiler();
  result->save(path_);
  on_ = false;
  std::printf("[trace] step %lld -> %s\n", static_cast<long long>(step), path_.c_str());
}

}  // namespace vdt
