// `vdt ckpt inspect|check|diff|merge-lora|quantize-base` (docs/design.md §7): look into checkpoints, fold a LoRA into
// base weights, write a base's FP8-stored block linears (docs/planner.md, "Streaming and the FP8 base").
#include <cstdio>

#include "cli/commands.h"
#include "core/device_flag.h"
#include "core/error.h"
#include "distributed/fp8_base.h"
#include "model/denoiser_registry.h"
#include "model/weights_io.h"
#include "model/h3/h3_lora.h"
#include "model/lora.h"
#include "tools/ckpt.h"

namespace vdt::cli {

void add_ckpt(CLI::App& app, int& exit_code) {
  auto* ckpt =
      app.add_subcommand("ckpt", "Inspect, check, compare checkpoints; merge a LoRA; export to diffusers / ComfyUI");
  ckpt->require_subcommand(1);
  add_ckpt_export(*ckpt, exit_code);

  auto files = std::make_shared<CkptFilesArgs>();
  auto* inspect = ckpt->add_subcommand("inspect", "Summarise a checkpoint (one file or the shards of one)");
  bind_fields(inspect, files, CkptFilesArgs::fields());
  inspect->callback([files, &exit_code] {
    const auto s = inspect_ckpt(SafetensorsSet::open(files->files));
    std::printf("%lld tensors, %lld parameters, %.3f GB\n", static_cast<long long>(s.tensors),
                static_cast<long long>(s.parameters), static_cast<double>(s.bytes) / 1e9);
    for (const auto& [dt, n] : s.dtypes) std::printf("  %-8s %lld tensors\n", dt.c_str(), static_cast<long long>(n));
    std::printf("preset: %s%s\n", s.preset.empty() ? "(not a Wan or MiniMax-H3 DiT)" : s.preset.c_str(),
                s.family.empty() ? "" : (" (" + s.family + ")").c_str());
    if (s.sem_cond_keys) std::printf("gc_sem_cond: %lld keys\n", static_cast<long long>(s.sem_cond_keys));
    if (s.lora_modules) std::printf("LoRA: %lld modules\n", static_cast<long long>(s.lora_modules));
    for (const auto& [k, v] : s.metadata) {
      const std::string shown = v.size() > 120 ? v.substr(0, 117) + "..." : v;  // a long value's start
      std::printf("  meta %s = %s\n", k.c_str(), shown.c_str());
    }
    exit_code = 0;
  });

  auto check_args = std::make_shared<CkptCheckArgs>();
  auto* check = ckpt->add_subcommand("check", "Report every problem of a checkpoint, one line each; exit 1 if any");
  bind_fields(check, check_args, CkptCheckArgs::fields());
  check->callback([check_args, &exit_code] {
    const auto problems = check_ckpt(SafetensorsSet::open(check_args->files), check_args->model);
    for (const auto& p : problems) std::printf("%s\n", p.c_str());
    std::printf(problems.empty() ? "ok\n" : "%zu problem(s)\n", problems.size());
    exit_code = problems.empty() ? 0 : 1;
  });

  auto ab = std::make_shared<CkptDiffArgs>();
  auto* diff = ckpt->add_subcommand("diff", "Per-key differences of two checkpoints (max |a-b|, relative L2)");
  bind_fields(diff, ab, CkptDiffArgs::fields());
  diff->callback([ab, &exit_code] {
    const auto rows = diff_ckpt(SafetensorsSet::open({ab->a}), SafetensorsSet::open({ab->b}));
    double worst = 0;
    size_t structural = 0;
    for (const auto& r : rows) {
      if (!r.what.empty()) {
        ++structural;
        std::printf("%-60s %s\n", r.key.c_str(), r.what.c_str());
      } else if (r.max_abs > 0) {
        std::printf("%-60s max_abs %.3e rel_l2 %.3e\n", r.key.c_str(), r.max_abs, r.rel_l2);
      }
      worst = std::max(worst, r.rel_l2);
    }
    std::printf("%zu keys, %zu differ in presence or shape, worst relative L2 %.3e\n", rows.size(), structural, worst);
    exit_code = 0;
  });

  auto m = std::make_shared<MergeLoraArgs>();
  auto* merge = ckpt->add_subcommand("merge-lora", "Fold a LoRA into base weights: W + (alpha / rank) B A");
  bind_fields(merge, m, MergeLoraArgs::fields());
  merge->callback([m, &exit_code] {
    const auto base = SafetensorsSet::open(m->base);
    const auto lora = h3_lora_for_base(read_lora(m->lora, m->alpha), base, m->lora);
    auto meta = base.metadata();
    meta["merged_lora"] = m->lora;
    meta["lora_rank"] = std::to_string(lora.rank);
    meta["lora_alpha"] = std::to_string(lora.alpha);
    save_safetensors(m->out, merge_lora(base, lora, lora.alpha / static_cast<double>(lora.rank)), meta);
    std::printf("merged %zu LoRA modules (rank %lld, alpha %g, scale %g) into %s\n", lora.modules.size(),
                static_cast<long long>(lora.rank), lora.alpha, lora.alpha / static_cast<double>(lora.rank),
                m->out.c_str());
    exit_code = 0;
  });

  auto q = std::make_shared<QuantizeBaseArgs>();
  auto* quantize =
      ckpt->add_subcommand("quantize-base",
                           "Write base weights' frozen block linears as FP8 (E4M3, a scale per output channel) for "
                           "reuse (docs/planner.md)");
  bind_fields(quantize, q, QuantizeBaseArgs::fields());
  quantize->callback([q, &exit_code] {
    const auto set = SafetensorsSet::open(weight_files(q->weights, "--weights"));
    const auto dev = resolve_device(q->device, 0, 1, "--device");
    auto model = denoiser_for_weights(set, torch::TensorOptions().device(dev).dtype(torch::kBFloat16));
    load_weights(*model, set);
    for (auto& p : model->parameters()) p.requires_grad_(false);  // the whole base is frozen
    const int64_t n = save_fp8_base(*model, q->out);
    std::printf("wrote %lld block linears of %s as FP8 to %s\n", static_cast<long long>(n), model->preset().c_str(),
                q->out.c_str());
    exit_code = 0;
  });
}

}  // namespace vdt::cli
