// Step benchmark. Weights are random (init_weights, then a non-zero head so every block gets gradients), latents,
// noise and text are random; one grid index per step as in training; frame 0 is the clean conditioning frame.
#include "train/step_bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/rng.h"
#include "diffusion/flow_match.h"
#include "model/wan_dit.h"
#include "train/activation_checkpoint.h"
#include "train/optimizer.h"
#include "train/trace.h"

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define VDT_HAS_CUDA_ALLOC 1
#endif

namespace vdt {

void StepBenchConfig::validate() const {
  VDT_CHECK(checkpointing == "block" || checkpointing == "none", "--checkpointing: expected block or none, got '",
            checkpointing, "'");
  VDT_CHECK(precision == "bf16" || precision == "fp32", "--precision: expected bf16 or fp32, got '", precision, "'");
  VDT_CHECK(device == "cpu" || device == "cuda", "--device: expected cpu or cuda, got '", device, "'");
  VDT_CHECK(device != "cuda" || torch::cuda::is_available(), "--device cuda: no CUDA device is visible");
  VDT_CHECK(steps > 0 && warmup >= 0, "--steps must be > 0 and --warmup >= 0");
  VDT_CHECK(frames > 1 && height > 0 && width > 0 && text_len > 0, "--frames (> 1), --height, --width, --text-len must be positive");
  preset_config(model);
}

double train_flops_per_step(const ModelConfig& c, int64_t L, int64_t Lt, int64_t B) {
  const double D = c.dim, FF = c.ffn_dim;
  // Per video token per layer: self-attn q,k,v,o (8D^2) + scores and weighted sum (4LD) + cross q,o (4D^2)
  // + cross scores (4 Lt D) + FFN (4 D FF). Per sample per layer: cross k,v on the text (4 Lt D^2).
  const double per_token = 8 * D * D + 4.0 * L * D + 4 * D * D + 4.0 * Lt * D + 4 * D * FF;
  const double fwd = B * c.num_layers * (L * per_token + 4.0 * Lt * D * D);
  return 3 * fwd;
}

StepBenchResult run_step_bench(const StepBenchConfig& cfg,
                               const std::function<void(int, double, double)>& on_step) {
  cfg.validate();
  ModelConfig mc = preset_config(cfg.model);
  if (cfg.layers > 0) mc.num_layers = cfg.layers;
  const torch::Device device(cfg.device == "cuda" ? torch::kCUDA : torch::kCPU);
  const auto dtype = cfg.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  const bool cuda = device.is_cuda();
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };

  WanDiT model(mc, torch::TensorOptions().device(device).dtype(dtype));
  model->init_weights(0);
  {
    torch::NoGradGuard ng;
    model->head->head->weight.normal_(0, 0.02);
  }
  if (cfg.checkpointing == "block") enable_block_checkpointing(*model);
  std::vector<torch::Tensor> params = model->parameters();
  AdamW opt({{"all", params, 1e-5, 0.01}}, {});

  StepBenchResult r;
  for (const auto& p : params) r.params += p.numel();
  r.tokens = cfg.frames * (cfg.height / mc.patch[1]) * (cfg.width / mc.patch[2]);
  r.tflop_per_step = train_flops_per_step(mc, r.tokens, cfg.text_len) / 1e12;

  auto gen = make_generator(device, 1234);
  auto opts = torch::TensorOptions().device(device).dtype(dtype);
  auto x0 = torch::randn({1, mc.in_dim, cfg.frames, cfg.height, cfg.width}, gen, opts);
  auto ctx = torch::randn({1, cfg.text_len, mc.text_dim}, gen, opts);
  const auto grid = training_grid();
  const auto weights = training_weights(grid);
  RngStream ids(1234, 0);

#ifdef VDT_HAS_CUDA_ALLOC
  if (cuda) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#endif
  std::vector<double> times;
  StepTrace trace;  // VDT_TRACE / VDT_TRACE_STEP (1-based, warm-up included)
  for (int s = 0; s < cfg.warmup + cfg.steps; ++s) {
    trace.before_step(s + 1);
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    // Grid index from the upper 990 (ids 0..9 have weight 0 in bf16 and would train nothing).
    const int64_t id = 10 + static_cast<int64_t>(ids.uniform(s, 0) * 990);
    auto noise = torch::randn(x0.sizes(), gen, opts);
    auto ex = make_sft_example(x0, noise, id, grid, weights, dtype, true);
    auto pred = model->forward({ex.x_t, ex.t.to(dtype), ctx});
    auto loss = flow_mse(pred, ex.target, true) * ex.weight;
    loss.backward();
    clip_grad_norm(params, 1.0);
    opt.step();
    opt.zero_grad();
    sync();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.last_loss = loss.item<double>();
    trace.after_step(s + 1);
    if (s >= cfg.warmup) times.push_back(dt);
    if (on_step) on_step(s, dt, r.last_loss);
  }
  std::sort(times.begin(), times.end());
  r.median_s = times[times.size() / 2];
  r.min_s = times.front();
  r.max_s = times.back();
  r.mfu = r.tflop_per_step / r.median_s / cfg.peak_tflops;
#ifdef VDT_HAS_CUDA_ALLOC
  if (cuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    r.peak_gib = static_cast<double>(stats.allocated_bytes[0].peak) / (1ull << 30);
  }
#endif
  return r;
}

}  // namespace vdt
