// `vdt bench step`: times one full SFT training step at the given geometry (SPEC §9). Fixed-format output: one
// line per step, then a `result` line of key=value pairs (parsed by benchmarks/ scripts).
#include <cstdio>

#include "cli/commands.h"
#include "train/step_bench.h"

namespace vdt::cli {

void add_bench(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of the hot paths");
  bench->require_subcommand(1);
  auto cfg = std::make_shared<StepBenchConfig>();
  auto* step = bench->add_subcommand("step", "One SFT training step (forward, backward, AdamW) with random weights");
  step->add_option("--model", cfg->model, "model preset")->capture_default_str();
  step->add_option("--layers", cfg->layers, "override the preset's layer count (0 = preset)")->capture_default_str();
  step->add_option("--frames", cfg->frames, "latent frames")->capture_default_str();
  step->add_option("--height", cfg->height, "latent height")->capture_default_str();
  step->add_option("--width", cfg->width, "latent width")->capture_default_str();
  step->add_option("--text-len", cfg->text_len, "text tokens")->capture_default_str();
  step->add_option("--steps", cfg->steps, "timed steps")->capture_default_str();
  step->add_option("--warmup", cfg->warmup, "untimed warm-up steps")->capture_default_str();
  step->add_option("--checkpointing", cfg->checkpointing, "block or none")->capture_default_str();
  step->add_option("--precision", cfg->precision, "bf16 (weights and moments) or fp32")->capture_default_str();
  step->add_option("--device", cfg->device, "cuda or cpu")->capture_default_str();
  step->add_option("--peak-tflops", cfg->peak_tflops, "dense rate for MFU")->capture_default_str();
  step->callback([cfg, &exit_code] {
    cfg->validate();
    std::printf("bench step: model %s layers %lld geometry %lldx%lldx%lld text %lld checkpointing %s precision %s device %s\n",
                cfg->model.c_str(), static_cast<long long>(cfg->layers), static_cast<long long>(cfg->frames),
                static_cast<long long>(cfg->height), static_cast<long long>(cfg->width),
                static_cast<long long>(cfg->text_len), cfg->checkpointing.c_str(), cfg->precision.c_str(),
                cfg->device.c_str());
    std::fflush(stdout);
    const auto r = run_step_bench(*cfg, [&](int s, double dt, double loss) {
      std::printf("  step %2d  %.3f s  loss %.5f%s\n", s, dt, loss, s < cfg->warmup ? "  (warm-up)" : "");
      std::fflush(stdout);
    });
    std::printf("result median_s=%.4f min_s=%.4f max_s=%.4f peak_gib=%.2f tflop_per_step=%.1f mfu=%.3f params=%lld tokens=%lld\n",
                r.median_s, r.min_s, r.max_s, r.peak_gib, r.tflop_per_step, r.mfu, static_cast<long long>(r.params),
                static_cast<long long>(r.tokens));
    exit_code = 0;
  });
}

}  // namespace vdt::cli
