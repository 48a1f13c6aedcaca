// `vdt bench kernels`: the on-GPU check of the fused elementwise ops (model/kernels/fused_ops.h). For each op and dtype
// it runs the fused op (the CUDA kernel on a CUDA build, else the ATen fallback; the backend is printed) and the
// autograd reference at the real shapes (Wan 5B: D 3072, L 8190 in 21 frame groups; H3: D 5120, S 12686 rows over 21
// AdaLN rows), compares the output and every gradient with the reference and with a float64 evaluation of the
// reference (the truth), and times fused vs reference forward + backward. The FP8 linear (model/kernels/fp8_linear.h)
// is checked the same way against its emulation, with the float64 plain linear as the truth and the plain linear as
// the timed reference. Not here: the model or the trainers.
#pragma once
#include <string>
#include <vector>

#include "train/loop/config_sections.h"

namespace vdt {

struct KernelBenchConfig {
  std::string device = "cuda";       // core/device_flag.h; cpu: the ATen fallback (use --shapes small)
  std::string shapes = "real";       // real (Wan 5B / H3 widths) | small (a quick check, CPU tests)
  std::string dtypes = "bf16,fp32";  // comma-separated: bf16, fp32
  int iters = 20, warmup = 3;        // timed and untimed fwd+bwd passes per path
  void validate() const;
  static const std::vector<ConfigField<KernelBenchConfig>>& fields();
};

// One op at one dtype: the worst error over its output and gradients.
struct KernelCheck {
  std::string op, dtype, backend, shape;
  struct Checked {
    std::string name;
    double max_abs = 0, max_rel = 0;              // fused vs reference: max |a - b|, and that over max |reference|
    double fused_vs_truth = 0, ref_vs_truth = 0;  // max rel errors against the float64 evaluation
    bool pass = false;
  };
  std::vector<Checked> tensors;
  double fused_ms = 0, reference_ms = 0;  // forward + backward, mean of the timed passes
  bool pass() const;
};

// Runs every op at every dtype; `print` gets one line per checked tensor and one per op (fixed format).
std::vector<KernelCheck> run_kernel_bench(const KernelBenchConfig& cfg, void (*print)(const std::string&) = nullptr);

}  // namespace vdt
