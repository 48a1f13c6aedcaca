// `vdt eval`: the Fréchet distance between generated latent clips and the data's (tools/latent_eval.h).
#include <cstdio>

#include "cli/commands.h"
#include "tools/latent_eval.h"

namespace vdt::cli {

void add_eval(CLI::App& app, int& exit_code) {
  auto cfg = std::make_shared<LatentEvalConfig>();
  auto* e = app.add_subcommand("eval",
                               "Distribution distance between generated latent clips (vdt sample's outputs) and the "
                               "data: the Fréchet distance of per-clip appearance and motion features");
  bind_fields(e, cfg, LatentEvalConfig::fields());
  e->callback([cfg, &exit_code] {
    const auto r = run_latent_eval(*cfg);
    const auto& s = r.clip_shape;
    std::printf(
        "eval: %lld generated clips (%s) vs %lld reference clips, [%lld, %lld, %lld, %lld] each, %lld features\n",
        static_cast<long long>(r.n_generated), r.key.c_str(), static_cast<long long>(r.n_reference),
        static_cast<long long>(s[0]), static_cast<long long>(s[1]), static_cast<long long>(s[2]),
        static_cast<long long>(s[3]), static_cast<long long>(r.features));
    std::printf("frechet_distance %.6g", r.distance);
    for (const auto& [name, d] : r.groups) std::printf("  %s %.6g", name.c_str(), d);
    std::printf("\n");
    if (!cfg->out.empty()) std::printf("wrote %s\n", cfg->out.c_str());
    exit_code = 0;
  });
}

}  // namespace vdt::cli
