// `vdt demo`: the whole SFT pipeline on the CPU with synthetic data — synthesize a data root, train the tiny preset,
// validate, export, sample, and write a preview grid and a plot of loss and the two validation gaps. The proof the
// adapter learned: the final gap uncond - cond is clearly positive.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/png.h"
#include "generate/preview.h"
#include "tools/command_args.h"
#include "tools/synth.h"
#include "train/checkpoint/export.h"
#include "generate/clip_sampling.h"
#include "train/sft/sft_trainer.h"

namespace vdt::cli {
namespace {

// Columns of a CSV written by CsvLog (no quoted commas in the numeric columns we read).
std::map<std::string, std::vector<double>> read_csv(const std::string& path) {
  std::ifstream f(path);
  VDT_CHECK(f.good(), "cannot read ", path);
  std::string line;
  std::getline(f, line);
  std::vector<std::string> cols;
  std::stringstream hs(line);
  for (std::string c; std::getline(hs, c, ',');) cols.push_back(c);
  std::map<std::string, std::vector<double>> out;
  while (std::getline(f, line)) {
    std::stringstream ls(line);
    std::string cell;
    for (size_t i = 0; i < cols.size() && std::getline(ls, cell, ','); ++i) {
      try {
        out[cols[i]].push_back(std::stod(cell));
      } catch (...) {
        out[cols[i]].push_back(std::nan(""));
      }
    }
  }
  return out;
}

}  // namespace

void add_demo(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<DemoArgs>();
  auto* d = app.add_subcommand(
      "demo", "Synthetic data -> train the tiny model on the CPU -> validate, export, sample, preview");
  bind_fields(d, o, DemoArgs::fields());
  d->callback([o, &exit_code] {
    namespace fs = std::filesystem;
    const fs::path out = fs::absolute(o->out);
    // 1) data
    SynthConfig sc;
    sc.out = (out / "data").string(), sc.seed = o->seed, sc.overwrite = true;
    const auto rep = synth_root(sc);  // deterministic in the seed: a resumed demo gets the same data again
    std::printf("[demo] data root %s: %lld train clips (%lld marked drop), %lld val clips, %lld prompts, res %s\n",
                sc.out.c_str(), static_cast<long long>(rep.n_train), static_cast<long long>(rep.n_drop),
                static_cast<long long>(rep.n_val), static_cast<long long>(rep.n_prompts), rep.res.c_str());
    // 2) train
    SftConfig c;
    c.data_root = sc.out, c.output = (out / "run").string(), c.model = "tiny";
    c.compute.device = "cpu", c.compute.precision = "fp32";
    c.random_init = true;  // the demo trains the tiny preset from scratch (the start-up table says RANDOM INIT)
    c.res = rep.res, c.max_steps = o->steps, c.lr = 5e-4, c.cond_lr = 2e-3, c.warmup_steps = 20, c.grad_accum = 1;
    c.batch_size = 2, c.num_workers = o->workers, c.val_every = std::max<int64_t>(o->steps / 6, 1), c.val_n = 4;
    c.save_every = o->steps, c.log_every = std::max<int64_t>(o->steps / 30, 1), c.random.seed = o->seed;
    c.gradient_checkpointing = false;
    c.resume = o->resume;
    if (o->resume.empty()) fs::remove_all(c.output);
    const auto sum = train_sft(c);
    if (sum.stopped) {
      std::printf(
          "\n[demo] training stopped at step %lld of %lld; its state is in %s.\n"
          "       Continue where it stopped:  scripts/demo.sh --resume auto%s\n",
          static_cast<long long>(sum.steps), static_cast<long long>(o->steps), sum.state_dir.c_str(),
          o->steps == 400 ? "" : (" --steps " + std::to_string(o->steps)).c_str());
      exit_code = 0;
      return;
    }
    // 3) sample val clips with the export, write the preview grid
    auto model = load_checkpoint_model({sum.last_export}, torch::kCPU, torch::kFloat32);
    SftDataConfig dc;
    dc.root = sc.out, dc.split = "val", dc.res = rep.res, dc.limit = 2;
    SftDataset val(dc);
    const auto vae = SynthVae::open(sc.out);
    std::vector<torch::Tensor> rows;
    EulerConfig ec;
    for (size_t i = 0; i < val.size(); ++i) {
      const auto r = sample_clip(*model, val, i, ec, o->seed);
      rows.push_back(vae.decode(r.ground_truth));
      rows.push_back(vae.decode(r.conditioned));
      rows.push_back(vae.decode(r.unconditioned));
    }
    const std::string preview = (out / "preview.png").string();
    write_png(preview, frame_grid(rows, 2, 4));
    // 4) the validation numbers the summary reports: val MSE with conditions and the two gaps, per step (mean over
    // timesteps); plot.png draws them with the train loss.
    auto va = read_csv((out / "run" / "val_log.csv").string());
    std::map<double, std::array<double, 3>> gaps;  // step -> (sum gap_uncond, sum gap_nulltext, n)
    for (size_t i = 0; i < va["step"].size(); ++i) {
      auto& g = gaps[va["step"][i]];
      g[0] += va["gap_uncond"][i], g[1] += va["gap_nulltext"][i], g[2] += 1;
    }
    struct Series {
      std::vector<double> x, y;
    } vmse, gu, gn;
    std::map<double, std::array<double, 2>> vm;
    for (size_t i = 0; i < va["step"].size(); ++i) vm[va["step"][i]][0] += va["mse"][i], vm[va["step"][i]][1] += 1;
    for (const auto& [step, m] : vm) vmse.x.push_back(step), vmse.y.push_back(m[0] / m[1]);
    for (const auto& [step, g] : gaps) {
      gu.x.push_back(step), gu.y.push_back(g[0] / g[2]);
      gn.x.push_back(step), gn.y.push_back(g[1] / g[2]);
    }
    // plot.png: matplotlib, through vdt's Python package (its venv is set up on first use; docs/python.md).
    const std::string plot = (out / "plot.png").string();
    int plot_rc = 0;
    try {
      plot_rc = run_python_tool("plot", {c.output, "--out", plot});
    } catch (const std::exception& e) {
      std::printf("[demo] %s\n", e.what());
      plot_rc = -1;
    }
    if (plot_rc != 0) std::printf("[demo] plot.png was not drawn (python -m vdt_py plot failed; see above)\n");
    const double final_gap = gu.y.empty() ? 0 : gu.y.back();
    std::printf("\n[demo] done in %s\n", out.c_str());
    std::printf(
        "  data        %s\n  run logs    %s (train_log.csv, val_log.csv, tensorboard/, config.json, done.json)\n",
        sc.out.c_str(), c.output.c_str());
    std::printf("  export      %s\n", sum.last_export.c_str());
    std::printf("  preview     %s (per val clip 3 rows: ground truth, generated with conditions, without)\n",
                preview.c_str());
    std::printf("  plot        %s (top: train loss and its running mean, val mse; bottom: the val gaps)\n",
                plot.c_str());
    std::printf("  val mse     %.4f (step %.0f) -> %.4f (step %.0f)\n", vmse.y.front(), vmse.x.front(), vmse.y.back(),
                vmse.x.back());
    std::printf("  final gaps  uncond-cond %.4f, nulltext-cond %.4f  %s\n", final_gap, gn.y.empty() ? 0 : gn.y.back(),
                final_gap > 0 ? "(positive: the adapter uses the ids)" : "(NOT positive: the adapter did not learn)");
    exit_code = final_gap > 0 ? 0 : 1;
  });
}

}  // namespace vdt::cli
