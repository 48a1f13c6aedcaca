// `vdt env`: what a bug report or a speed question needs, in one place: vdt's commit and build, LibTorch and its CUDA,
// cuDNN and NCCL, every visible GPU (memory, compute capability, whether vdt's CUDA kernels and the FP8 path run on
// it), the cache and venv paths and the environment variables vdt and its libraries read; `--json` for tools. Its own
// translation unit (not in a unity batch): only it sees the CUDA / NCCL / kernel-architecture defines that
// CMakeLists.txt sets on it. It reads; it changes nothing (no venv is created, no GPU memory is kept).
#include <dlfcn.h>
#include <unistd.h>

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/headeronly/version.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef VDT_WITH_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif
#ifdef VDT_WITH_NCCL
#include <torch/csrc/cuda/nccl.h>
#endif

#include "cli/commands.h"
#include "model/kernels/fp8_linear.h"
#include "model/kernels/fused_ops.h"
#include "tools/command_args.h"

#ifndef VDT_CUDA_KERNEL_ARCHS
#define VDT_CUDA_KERNEL_ARCHS ""
#endif
#ifndef VDT_BUILD_TYPE
#define VDT_BUILD_TYPE ""
#endif

namespace vdt::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// "13.0" from CUDA's 13000, cuDNN's 91002 -> "9.10.2" (major * 10000 + minor * 100 + patch since cuDNN 9).
std::string cuda_version(long v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
std::string cudnn_version(long v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

// The file a symbol was loaded from: which LibTorch this process runs with (LD_LIBRARY_PATH, RPATH or an install).
std::string library_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) && info.dli_fname) return fs::weakly_canonical(info.dli_fname).string();
  return "";
}

json libtorch_info() {
  json j;
  j["version"] = TORCH_VERSION;
  j["library"] = library_of(reinterpret_cast<const void*>(&at::globalContext));
  j["cuda_build"] = at::hasCUDA() || at::detail::getCUDAHooks().hasCUDART();
  j["threads"] = at::get_num_threads();
  const auto& hooks = at::detail::getCUDAHooks();
  j["cuda_runtime"] = nullptr, j["cudnn"] = nullptr, j["nccl"] = nullptr;
  try {
    if (hooks.hasCUDART()) j["cuda_runtime"] = cuda_version(hooks.versionCUDART());
    if (hooks.hasCuDNN()) j["cudnn"] = cudnn_version(hooks.versionRuntimeCuDNN());
  } catch (const std::exception&) {  // a CPU-only LibTorch: the hooks throw; the nulls say "not available"
  }
#ifdef VDT_WITH_NCCL
  const auto v = torch::cuda::nccl::version();  // major << 32 | minor << 16 | patch (torch/csrc/cuda/nccl.cpp)
  j["nccl"] = std::to_string(v >> 32) + "." + std::to_string((v >> 16) & 0xffff) + "." + std::to_string(v & 0xffff);
#endif
  return j;
}

json gpus_info() {
  json gpus = json::array();
  const int n = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  for (int i = 0; i < n; ++i) {
    json g;
    g["device"] = "cuda:" + std::to_string(i);
#ifdef VDT_WITH_TORCH_CUDA
    const auto* p = at::cuda::getDeviceProperties(i);
    g["name"] = p->name;
    g["memory_gib"] = static_cast<double>(p->totalGlobalMem) / (1ull << 30);
    g["compute_capability"] = std::to_string(p->major) + "." + std::to_string(p->minor);
    g["multiprocessors"] = p->multiProcessorCount;
#endif
    const torch::Device dev(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    const auto probe = torch::zeros({1}, torch::TensorOptions().device(dev));
    g["vdt_kernels"] = kernels::cuda_kernels_take(probe);
    const auto why = kernels::fp8_unsupported_reason(dev);
    g["fp8"] = why.empty();
    if (!why.empty()) g["fp8_why_not"] = why;
    gpus.push_back(g);
  }
  return gpus;
}

// The variables vdt, LibTorch, NCCL, CUDA and the launchers read (docs/distributed.md, docs/python.md).
json env_vars() {
  static const char* prefixes[] = {"VDT_", "CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "OMP_", "MKL_", "GC_"};
  static const char* names[] = {"RANK",
                                "WORLD_SIZE",
                                "LOCAL_RANK",
                                "LOCAL_WORLD_SIZE",
                                "MASTER_ADDR",
                                "MASTER_PORT",
                                "SLURM_PROCID",
                                "SLURM_NTASKS",
                                "SLURM_LOCALID",
                                "SLURM_NTASKS_PER_NODE",
                                "LD_LIBRARY_PATH",
                                "PYTHONPATH",
                                "TORCHELASTIC_USE_AGENT_STORE"};
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    bool keep = std::any_of(std::begin(names), std::end(names), [&](const char* n) { return k == n; });
    for (const char* p : prefixes) keep = keep || k.rfind(p, 0) == 0;
    if (keep) out.emplace_back(k, kv.substr(eq + 1));
  }
  std::sort(out.begin(), out.end());
  json j = json::object();
  for (auto& [k, v] : out) j[k] = v;
  return j;
}

json paths_info() {
  json j;
  const std::string home = env_or("HOME", "");
  const fs::path cache = env_or("VDT_CACHE", home + "/.cache/vdt");
  j["cache"] = cache.string();
  const std::string tools = python_tool_root();
  j["python_package"] = tools.empty() ? "" : tools + "/python/src";
  // The venvs scripts/py_env.sh made (one per python/pyproject.toml and python3 version), newest first; $VDT_PYTHON,
  // when set, is what `vdt data prepare` / `vdt decode` run instead.
  std::vector<std::pair<fs::file_time_type, std::string>> venvs;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(cache, ec))
    if (d.path().filename().string().rfind("pyenv-", 0) == 0 && fs::exists(d.path() / ".complete"))
      venvs.emplace_back(fs::last_write_time(d.path() / ".complete", ec), (d.path() / "bin" / "python").string());
  std::sort(venvs.rbegin(), venvs.rend());
  j["venvs"] = json::array();
  for (auto& v : venvs) j["venvs"].push_back(v.second);
  j["vdt_python"] = env_or("VDT_PYTHON", "");
  return j;
}

json collect() {
  json j;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  j["vdt"] = {{"commit", build_commit()},
              {"binary", fs::weakly_canonical("/proc/self/exe").string()},
              {"build_type", VDT_BUILD_TYPE},
              {"compiler", __VERSION__},
              {"cuda_kernels", kernels::cuda_kernels_built()},
              {"cuda_kernel_archs", VDT_CUDA_KERNEL_ARCHS}};
  j["host"] = {{"name", host},
               {"cpus", static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN))},
               {"memory_gib", static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / (1ull << 30)}};
  j["libtorch"] = libtorch_info();
  j["gpus"] = gpus_info();
  j["paths"] = paths_info();
  j["env"] = env_vars();
  return j;
}

std::string str_or(const json& v, const char* none) { return v.is_string() ? v.get<std::string>() : none; }

void print_text(const json& j) {
  const auto& v = j["vdt"];
  const auto& t = j["libtorch"];
  std::printf("vdt        %s (%s, %s build, %s)\n", v["commit"].get<std::string>().c_str(),
              v["binary"].get<std::string>().c_str(), v["build_type"].get<std::string>().c_str(),
              v["compiler"].get<std::string>().c_str());
  std::printf("host       %s, %lld CPUs, %.1f GiB\n", j["host"]["name"].get<std::string>().c_str(),
              static_cast<long long>(j["host"]["cpus"].get<int64_t>()), j["host"]["memory_gib"].get<double>());
  std::printf("libtorch   %s (%s; %s; %d intra-op threads)\n", t["version"].get<std::string>().c_str(),
              t["library"].get<std::string>().c_str(), t["cuda_build"].get<bool>() ? "CUDA build" : "CPU-only build",
              t["threads"].get<int>());
  std::printf("cuda       runtime %s, cuDNN %s, NCCL %s\n", str_or(t["cuda_runtime"], "none").c_str(),
              str_or(t["cudnn"], "none").c_str(), str_or(t["nccl"], "not built (single process only)").c_str());
  std::printf("kernels    vdt's CUDA kernels: %s\n",
              v["cuda_kernels"].get<bool>()
                  ? ("built for " + v["cuda_kernel_archs"].get<std::string>()).c_str()
                  : "not built (no nvcc or a CPU-only LibTorch at configure time): the ATen fallbacks run");
  const auto& gpus = j["gpus"];
  if (gpus.empty())
    std::printf("gpus       none visible (CUDA_VISIBLE_DEVICES=%s)\n",
                str_or(j["env"].value("CUDA_VISIBLE_DEVICES", json()), "unset").c_str());
  for (const auto& g : gpus) {
    std::printf("%-10s %s, %.1f GiB, compute capability %s; vdt kernels %s; FP8 %s\n",
                g["device"].get<std::string>().c_str(), str_or(g.value("name", json()), "?").c_str(),
                g.value("memory_gib", 0.0), str_or(g.value("compute_capability", json()), "?").c_str(),
                g["vdt_kernels"].get<bool>() ? "run" : "do not run (ATen fallback)",
                g["fp8"].get<bool>() ? "usable" : ("not usable: " + g["fp8_why_not"].get<std::string>()).c_str());
  }
  const auto& p = j["paths"];
  std::printf("cache      %s\n", p["cache"].get<std::string>().c_str());
  std::printf("python     package %s; venv %s\n", str_or(p["python_package"], "?").c_str(),
              !p["vdt_python"].get<std::string>().empty()
                  ? ("$VDT_PYTHON " + p["vdt_python"].get<std::string>()).c_str()
              : p["venvs"].empty() ? "none yet (scripts/py_env.sh makes it on first use)"
                                   : p["venvs"][0].get<std::string>().c_str());
  std::printf("env%s\n", j["env"].empty() ? "        none of the variables vdt and its libraries read is set" : "");
  for (const auto& [k, val] : j["env"].items()) std::printf("  %s=%s\n", k.c_str(), val.get<std::string>().c_str());
}

}  // namespace

void add_env(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EnvArgs>();
  auto* sub = app.add_subcommand("env",
                                 "What vdt sees: commit, LibTorch/CUDA/cuDNN/NCCL, GPUs, kernels, FP8, paths, "
                                 "environment (paste it into a bug report)");
  bind_fields(sub, args, EnvArgs::fields());
  sub->callback([args, &exit_code] {
    const json j = collect();
    if (args->json)
      std::printf("%s\n", j.dump(2).c_str());
    else
      print_text(j);
    exit_code = 0;
  });
}

}  // namespace vdt::cli
