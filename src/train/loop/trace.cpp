#include "train/loop/trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace vdt {
namespace {
namespace prof = torch::profiler::impl;

void sync_devices() {
  if (torch::cuda::is_available()) torch::cuda::synchronize();
}
}  // namespace

StepTrace::StepTrace() {
  const char* path = std::getenv("VDT_TRACE");
  const char* step = std::getenv("VDT_TRACE_STEP");
  if (!path || !*path) return;
  path_ = path;
  try {
    step_ = step ? std::stoll(step) : 3;
  } catch (...) {
    VDT_FAIL("VDT_TRACE_STEP='", step, "': expected a step number");
  }
}

void StepTrace::before_step(int64_t step) {
  if (path_.empty() || step != step_) return;
  sync_devices();
  const prof::ProfilerConfig cfg(prof::ProfilerState::KINETO);
  std::set<prof::ActivityType> acts{prof::ActivityType::CPU};
  if (torch::cuda::is_available()) acts.insert(prof::ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(cfg, acts);
  torch::autograd::profiler::enableProfiler(cfg, acts);
  on_ = true;
}

void StepTrace::after_step(int64_t step) {
  if (!on_ || step != step_) return;
  sync_devices();
  auto result = torch::autograd::profiler::disableProfiler();
  result->save(path_);
  on_ = false;
  std::printf("[trace] step %lld -> %s\n", static_cast<long long>(step), path_.c_str());
}

}  // namespace vdt
