// `vdt data check ROOT` (every problem of a data root, one line each) and `vdt data inspect ROOT` (a summary).
// `vdt data synth` registers itself from cli/data_synth.cpp through add_data_synth.
#include <cstdio>
#include <map>
#include <set>

#include "cli/commands.h"
#include "data/data_root.h"
#include "data/sft_dataset.h"
#include "data/text_table.h"
#include "tools/command_args.h"

namespace vdt::cli {

namespace {

void run_check(const DataCheckArgs& a, int& exit_code) {
  const auto problems = check_root(a.root, a.text_table, a.res);
  for (const auto& p : problems) std::printf("%s\n", p.c_str());
  if (!problems.empty()) {
    std::printf("%zu problem(s)\n", problems.size());
    exit_code = 1;
    return;
  }
  const auto root = DataRoot::open(a.root);
  std::map<std::string, int64_t> per_split;
  for (const auto& r : root.rows()) ++per_split[r.split];
  const auto table = TextTable::open(a.text_table.empty() ? root.default_text_table() : a.text_table);
  std::printf(
      "ok: %s  res %s  %zu clips (train %lld, val %lld)  latents [%lld, >=%lld, %lld, %lld]  vocab %s  "
      "text table %lld prompts\n",
      root.root().c_str(), root.info().res.c_str(), root.rows().size(), static_cast<long long>(per_split["train"]),
      static_cast<long long>(per_split["val"]), static_cast<long long>(root.info().latent_channels),
      static_cast<long long>(root.info().latent_frames), static_cast<long long>(root.info().latent_h),
      static_cast<long long>(root.info().latent_w), root.info().vocab.c_str(), static_cast<long long>(table->size()));
  exit_code = 0;
}

void run_inspect(const std::string& path) {
  const auto root = DataRoot::open(path);
  const DatasetInfo& d = root.info();
  std::printf("data root %s\n", root.root().c_str());
  std::printf("  format %s  res %s  latent_channels %lld  latent_frames %lld  latent_hw [%lld, %lld]\n",
              d.format.c_str(), d.res.c_str(), (long long)d.latent_channels, (long long)d.latent_frames,
              (long long)d.latent_h, (long long)d.latent_w);
  std::printf("  cells %lld  sem_scale %lld  vocab %s (K=%lld)  text_dim %lld  text_len %lld  null_prompt \"%s\"\n",
              (long long)d.cells, (long long)d.sem_scale, d.vocab.c_str(), (long long)vocab_size(d.vocab),
              (long long)d.text_dim, (long long)d.text_len, d.null_prompt.c_str());
  for (const char* split : {"train", "val"}) {
    int64_t n = 0, dropped = 0;
    std::set<std::string> runs;
    for (const auto& r : root.rows())
      if (r.split == split) ++n, dropped += r.drop, runs.insert(r.run);
    std::printf("  %-5s %lld clips (%lld drop:true)  %zu runs\n", split, (long long)n, (long long)dropped, runs.size());
  }
  const auto table = TextTable::open(root.default_text_table());
  std::printf("  text table %s: %lld prompts x [%lld, %lld]\n", table->path().c_str(), (long long)table->size(),
              (long long)table->text_len(), (long long)table->text_dim());
  SftDataConfig cfg;
  cfg.root = path;
  cfg.res = d.res;
  cfg.vocab = d.vocab;
  cfg.include_dropped = true;
  for (const char* split : {"train", "val"}) {
    cfg.split = split;
    SftDataset ds(cfg, table);
    if (ds.size() == 0) continue;
    const auto s = ds.get_with(0, false, false);
    std::printf(
        "  sample %s[0] '%s': latents [%lld, %lld, %lld, %lld] %s  ids [%lld, %lld, %lld] uint8  "
        "text rows %zu\n",
        split, s.clip_id.c_str(), (long long)s.latents.size(0), (long long)s.latents.size(1),
        (long long)s.latents.size(2), (long long)s.latents.size(3), c10::toString(s.latents.scalar_type()),
        (long long)s.ids.size(0), (long long)s.ids.size(1), (long long)s.ids.size(2), s.text_rows.size());
    break;
  }
}

}  // namespace

void add_data(CLI::App& app, int& exit_code) {
  auto* data_cmd = app.add_subcommand("data", "Data roots: check, inspect, synth, prepare");
  data_cmd->require_subcommand(1);

  auto check = std::make_shared<DataCheckArgs>();
  auto* sub = data_cmd->add_subcommand("check", "Validate a data root; print every problem with its file");
  bind_fields(sub, check, DataCheckArgs::fields());
  sub->callback([check, &exit_code] { run_check(*check, exit_code); });

  auto inspect = std::make_shared<DataInspectArgs>();
  auto* insp = data_cmd->add_subcommand("inspect", "Summarise a data root (fields, splits, runs, a sample's shapes)");
  bind_fields(insp, inspect, DataInspectArgs::fields());
  insp->callback([inspect, &exit_code] {
    run_inspect(inspect->root);
    exit_code = 0;
  });

  add_data_synth(*data_cmd, exit_code);
  add_data_prepare(*data_cmd, exit_code);
}

}  // namespace vdt::cli
