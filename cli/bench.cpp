// `vdt bench step`: times the trainers' own steps at the given geometry (SPEC §9, tools/step_bench.h). Fixed-format
// output: one line per step, then a `result` line of key=value pairs (parsed by benchmarks/ scripts). Under torchrun
// it runs sharded as training does; rank 0 prints.
#include <cstdio>

#include "cli/commands.h"
#include "tools/step_bench.h"

namespace vdt::cli {

void add_bench(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of the hot paths");
  bench->require_subcommand(1);
  auto cfg = std::make_shared<StepBenchConfig>();
  auto* step = bench->add_subcommand("step", "The trainer's own steps (train sft or train causal) on a synthetic root "
                                             "with random weights");
  step->add_option(spellings("--trainer"), cfg->trainer, "sft or causal")->capture_default_str();
  step->add_option(spellings("--model"), cfg->model, "model preset")->capture_default_str();
  step->add_option(spellings("--frames"), cfg->frames, "latent frames (causal: the span, 6 chunks)")->capture_default_str();
  step->add_option(spellings("--height"), cfg->height, "latent height")->capture_default_str();
  step->add_option(spellings("--width"), cfg->width, "latent width")->capture_default_str();
  step->add_option(spellings("--text-len"), cfg->text_len, "text tokens")->capture_default_str();
  step->add_option(spellings("--steps"), cfg->steps, "timed steps")->capture_default_str();
  step->add_option(spellings("--warmup"), cfg->warmup, "untimed warm-up steps")->capture_default_str();
  step->add_option(spellings("--checkpointing"), cfg->checkpointing, "sft: block or none")->capture_default_str();
  step->add_option(spellings("--precision"), cfg->precision, "sft: bf16 (weights and moments), mixed or fp32; causal: bf16 or fp32")
      ->capture_default_str();
  step->add_option(spellings("--device"), cfg->device, "cuda, cuda:N or cpu (torchrun: each rank takes GPU LOCAL_RANK)")->capture_default_str();
  step->add_option(spellings("--attn"), cfg->attn, "causal: prefix or mask")->capture_default_str();
  step->add_option(spellings("--act-offload"), cfg->act_offload, "causal: on or off")->capture_default_str();
  step->add_option(spellings("--lora-rank"), cfg->lora_rank, "causal: LoRA rank (alpha = rank)")->capture_default_str();
  step->add_option(spellings("--peak-tflops"), cfg->peak_tflops, "dense rate for MFU")->capture_default_str();
  step->add_option(spellings("--work-dir"), cfg->work_dir, "where the synthetic root and the run go (default: a temp dir, removed; several nodes: shared storage)");
  step->callback([cfg, &exit_code] {
    const auto env = LaunchEnv::from_env();
    std::string device = cfg->device;
    const auto comm = communicator_for(env, device);
    if (env.rank == 0) {
      std::printf("bench step: trainer %s model %s geometry %lldx%lldx%lld text %lld checkpointing %s precision %s "
                  "device %s world %d\n", cfg->trainer.c_str(), cfg->model.c_str(), static_cast<long long>(cfg->frames),
                  static_cast<long long>(cfg->height), static_cast<long long>(cfg->width),
                  static_cast<long long>(cfg->text_len), cfg->checkpointing.c_str(), cfg->precision.c_str(),
                  cfg->device.c_str(), env.world);
      std::fflush(stdout);
    }
    const auto r = run_step_bench(*cfg, *comm, env.local_rank);
    if (env.rank == 0) {
      for (size_t s = 0; s < r.step_s.size(); ++s)
        std::printf("  step %2zu  %.3f s  loss %.5f%s\n", s, r.step_s[s], r.losses[s],
                    static_cast<int>(s) < cfg->warmup ? "  (warm-up)" : "");
      std::printf("result median_s=%.4f min_s=%.4f max_s=%.4f peak_gib=%.2f tflop_per_step=%.1f mfu=%.3f params=%lld "
                  "tokens=%lld rows=%lld world=%d\n", r.median_s, r.min_s, r.max_s, r.peak_gib, r.tflop_per_step, r.mfu,
                  static_cast<long long>(r.params), static_cast<long long>(r.tokens), static_cast<long long>(r.rows),
                  env.world);
    }
    exit_code = 0;
  });
}

}  // namespace vdt::cli
