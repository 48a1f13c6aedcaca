// `vdt bench step`: times the trainers' own steps at the given geometry (docs/BENCHMARKS.md, tools/step_bench.h).
// Fixed-format output: one line per step, then a `result` line of key=value pairs (parsed by benchmarks/ scripts).
// Under torchrun it runs sharded as training does; rank 0 prints. `vdt bench plan`: measures the memory planner's cost
// table for one preset on this device (tools/plan_bench.h, docs/planner.md); one line per measured row, then the
// table's path. `vdt bench kernels`: the fused CUDA kernels against their references at real shapes
// (tools/kernel_bench.h); exit code 1 when any check fails. `vdt bench sample`: streaming generation with the KV cache
// timed per chunk (tools/sample_bench.h): latency, video frames per second, cache memory.
#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "model/kernels/fused_ops.h"
#include "core/device_flag.h"
#include "tools/kernel_bench.h"
#include "tools/plan_bench.h"
#include "tools/sample_bench.h"
#include "tools/step_bench.h"
#include "train/plan/startup_plan.h"

namespace vdt::cli {

void add_bench(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of the hot paths");
  bench->require_subcommand(1);
  auto cfg = std::make_shared<StepBenchConfig>();
  auto* step = bench->add_subcommand("step",
                                     "The trainer's own steps (train sft or train causal) on a synthetic root "
                                     "with random weights");
  bind_fields(step, cfg, StepBenchConfig::fields());  // its own flags and the trainers' sections
  step->callback([cfg, step, &exit_code] {
    cfg->memory.given = given_flags(*step, StepBenchConfig::fields());  // the memory plan keeps these
    const auto env = LaunchEnv::from_env();
    std::string device = cfg->compute.device;
    const auto comm = communicator_for(env, device);
    if (env.rank == 0) {
      std::printf(
          "bench step: trainer %s model %s geometry %lldx%lldx%lld text %lld checkpointing %s precision %s "
          "fp8 %s memory %s device %s world %d\n",
          cfg->trainer.c_str(), cfg->model.c_str(), static_cast<long long>(cfg->frames),
          static_cast<long long>(cfg->height), static_cast<long long>(cfg->width),
          static_cast<long long>(cfg->text_len), cfg->memory.checkpointing.c_str(), cfg->compute.precision.c_str(),
          cfg->compute.fp8.c_str(), cfg->memory.memory.c_str(), cfg->compute.device.c_str(), env.world);
      std::fflush(stdout);
    }
    const auto r = run_step_bench(*cfg, *comm, env.local_rank);
    if (env.rank == 0) {
      for (size_t s = 0; s < r.step_s.size(); ++s)
        std::printf("  step %2zu  %.3f s  loss %.5f%s\n", s, r.step_s[s], r.losses[s],
                    static_cast<int>(s) < cfg->warmup ? "  (warm-up)" : "");
      std::printf(
          "result median_s=%.4f min_s=%.4f max_s=%.4f peak_gib=%.2f tflop_per_step=%.1f mfu=%.3f params=%lld "
          "tokens=%lld rows=%lld world=%d predicted_peak_gib=%.2f host_pinned_gib=%.2f\n",
          r.median_s, r.min_s, r.max_s, r.peak_gib, r.tflop_per_step, r.mfu, static_cast<long long>(r.params),
          static_cast<long long>(r.tokens), static_cast<long long>(r.rows), env.world, r.predicted_peak_gib,
          r.host_pinned_gib);
      if (cfg->trainer == "distill")
        std::printf("distill mean_s=%.4f student_step_s=%.4f critic_step_s=%.4f critic_ratio=%lld mfu_mean=%.3f\n",
                    r.mean_s, r.student_step_s, r.critic_step_s, static_cast<long long>(cfg->critic_ratio), r.mfu);
    }
    exit_code = 0;
  });

  auto pcfg = std::make_shared<PlanBenchConfig>();
  auto* plan = bench->add_subcommand("plan",
                                     "The memory planner's cost table for one preset on this device: per "
                                     "block, the bytes kept and the time of each checkpointing mode at a few "
                                     "sizes, into plans/<card>/<preset>.json (docs/planner.md)");
  bind_fields(plan, pcfg, PlanBenchConfig::fields());
  plan->callback([pcfg, &exit_code] {
    auto& c = *pcfg;
    const auto dev = resolve_device(c.device, 0, 1, "--device");
    c.card = device_memory_info(dev).name;
    char date[32];
    const auto now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    c.measured = std::string(build_commit()) + ", " + date;
    std::printf(
        "bench plan: model %s training %s attention %s frames %s latent %lldx%lld text %lld precision %s "
        "device %s (%s)\n",
        c.model.c_str(), c.training.c_str(), c.attention.c_str(), c.frames.empty() ? "(default)" : c.frames.c_str(),
        static_cast<long long>(c.height), static_cast<long long>(c.width), static_cast<long long>(c.text_len),
        c.precision.c_str(), c.device.c_str(), c.card.c_str());
    std::fflush(stdout);
    const auto r = run_plan_bench(c, [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    });
    std::printf("result table=%s rows=%zu measured=%zu\n", r.path.c_str(), r.table.rows.size(), r.lines.size());
    exit_code = 0;
  });

  auto kcfg = std::make_shared<KernelBenchConfig>();
  auto* kern = bench->add_subcommand("kernels",
                                     "The fused elementwise kernels (model/kernels) against their reference "
                                     "ops: errors of the output and every gradient (PASS/FAIL) and fwd+bwd "
                                     "time, at the Wan 5B and H3 widths");
  bind_fields(kern, kcfg, KernelBenchConfig::fields());
  kern->callback([kcfg, &exit_code] {
    std::printf("bench kernels: device %s shapes %s dtypes %s cuda kernels built %s\n", kcfg->device.c_str(),
                kcfg->shapes.c_str(), kcfg->dtypes.c_str(), kernels::cuda_kernels_built() ? "yes" : "no");
    std::fflush(stdout);
    const auto r = run_kernel_bench(*kcfg, [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    });
    int failed = 0;
    for (const auto& k : r) failed += k.pass() ? 0 : 1;
    std::printf("result checks=%zu failed=%d\n", r.size(), failed);
    exit_code = failed == 0 ? 0 : 1;
  });

  auto scfg = std::make_shared<SampleBenchConfig>();
  auto* smp = bench->add_subcommand("sample",
                                    "Streaming generation with the KV cache (a random-weight base and LoRA): "
                                    "per-chunk latency, video frames per second, cache memory");
  bind_fields(smp, scfg, SampleBenchConfig::fields());  // StreamSpeed's --fp8, --cuda-graphs, --merge-lora too
  smp->callback([scfg, &exit_code] {
    const auto& c = *scfg;
    std::printf(
        "bench sample: model %s latent %lldx%lld chunks %lld window %lld steps %lld cfg %g device %s "
        "precision %s fp8 %s cuda-graphs %s merge-lora %s\n",
        c.model.c_str(), static_cast<long long>(c.height), static_cast<long long>(c.width),
        static_cast<long long>(c.chunks), static_cast<long long>(c.window), static_cast<long long>(c.steps), c.cfg,
        c.device.c_str(), c.precision.c_str(), c.speed.fp8.c_str(), c.speed.cuda_graphs.c_str(),
        c.speed.merge_lora.c_str());
    std::fflush(stdout);
    const auto r = run_sample_bench(c);
    for (size_t n = 0; n < r.chunk_s.size(); ++n)
      std::printf("  chunk %2zu  %.4f s (steps %.4f s, commit %.4f s)  %lld frames%s\n", n,
                  r.chunk_s[n] + r.commit_s[n], r.chunk_s[n], r.commit_s[n],
                  static_cast<long long>(r.chunk_frames_px[n]),
                  static_cast<int64_t>(n) < r.warmup_chunks ? "  (warm-up)" : "");
    std::printf(
        "result median_chunk_s=%.4f frames_per_s=%.2f stream_frames_per_s=%.2f warmup_chunks=%lld "
        "cache_gib=%.3f peak_gib=%.2f prefix_s=%.4f rows_per_chunk=%lld prefix_rows=%lld sink_chunks=%lld "
        "window=%lld graphs=%d graph_replays=%lld family=%s\n",
        r.median_chunk_s, r.frames_per_s, r.stream_frames_per_s, static_cast<long long>(r.warmup_chunks), r.cache_gib,
        r.peak_gib, r.prefix_s, static_cast<long long>(r.rows_per_chunk), static_cast<long long>(r.prefix_rows),
        static_cast<long long>(r.sink_chunks), static_cast<long long>(r.window), r.graphs ? 1 : 0,
        static_cast<long long>(r.graph_replays), r.family.c_str());
    exit_code = 0;
  });
}

}  // namespace vdt::cli
