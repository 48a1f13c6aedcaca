// `vdt ckpt export --format diffusers|comfy`: a checkpoint or LoRA in the layouts diffusers and ComfyUI load
// (tools/ckpt_export.h).
#include <cstdio>

#include "cli/commands.h"
#include "tools/ckpt_export.h"

namespace vdt::cli {

void add_ckpt_export(CLI::App& ckpt, int& exit_code) {
  auto c = std::make_shared<ExportConfig>();
  auto* e = ckpt.add_subcommand("export", "Write a DiT checkpoint or a LoRA in diffusers' or ComfyUI's layout");
  bind_fields(e, c, ExportConfig::fields());
  e->callback([c, &exit_code] {
    const auto r = export_ckpt(*c);
    std::printf("exported %s (%lld tensors%s) as %s: %s\n", r.kind == "dit" ? "DiT" : "LoRA",
                static_cast<long long>(r.tensors),
                r.dropped ? (", " + std::to_string(r.dropped) + " gc_sem_cond tensors dropped").c_str() : "",
                c->format.c_str(), r.written.c_str());
    exit_code = 0;
  });
}

}  // namespace vdt::cli
