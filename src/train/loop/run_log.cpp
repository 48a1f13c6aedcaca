// Run logs. CSV numbers use fmt_num (compact, nan/inf spelled out); the TensorBoard tags follow the Python trainer
// (train/<name>, val/<name>_t<T>, val/<name>_mean).
#include "train/loop/run_log.h"

#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/sft_dataset.h"
#include "model/denoiser.h"
#include "train/loop/run_context.h"


namespace vdt {
namespace {

void write_json(const std::string& path, const nlohmann::ordered_json& j) { write_file_atomic(path, j.dump(2) + "\n"); }

std::string hms(double s) {
  const int64_t t = static_cast<int64_t>(s);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  return buf;
}

}  // namespace

std::string fmt_gnorm(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

void append_jsonl(const std::string& path, const nlohmann::json& row) {
  std::ofstream(path, std::ios::app) << row.dump() << "\n";
}

void trim_jsonl(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  // A JSON-lines log's rows through `step`; a torn last line (a kill mid-append) is dropped with the rest.
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  in.close();
  write_file_atomic(path, kept);
}

void prepare_logs(const std::vector<std::string>& paths, int64_t start_step, bool jsonl) {
  for (const auto& path : paths) {
    const auto name = std::filesystem::path(path).filename().string();
    if (start_step == 0) {
      const int64_t rows = count_rows(path, !jsonl);
      if (rows == 0) continue;
      const auto moved = move_aside(path);
      std::printf("[log] %s held %lld rows of an earlier run in this directory; this run starts at step 0, so they "
                  "were moved to %s\n", name.c_str(), static_cast<long long>(rows), moved->c_str());
      continue;
    }
    const int64_t before = count_rows(path, !jsonl);
    int64_t n = 0;
    if (jsonl) {
      trim_jsonl(path, start_step);
      n = before - count_rows(path, false);
    } else {
      n = CsvLog::keep_rows_through(path, static_cast<double>(start_step));
    }
    if (n > 0)
      std::printf("[log] %s: dropped %lld rows logged after step %lld (they are trained again)\n", name.c_str(),
                  static_cast<long long>(n), static_cast<long long>(start_step));
  }
}

nlohmann::ordered_json run_facts(const SftConfig& cfg, const SftDataset& train, const SftDataset* val,
                                 const Denoiser& model, const SemCondConfig& sem, int64_t n_micro,
                                 int64_t steps_per_epoch,
                                 const torch::Device& device, int64_t cond_params, int64_t dit_params, int world) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  nlohmann::ordered_json j;
  j["args"] = nlohmann::ordered_json::parse(cfg.to_json());
  j["res"] = cfg.res;  // the Python trainer's top-level key
  j["dataset"] = {{"root", cfg.data_root},
                  {"res", train.info().res},
                  {"train_total", train.n_total()},
                  {"train_dropped_rows", train.n_dropped()},
                  {"train_used", train.size()},
                  {"text_table_rows", train.text_table()->size()},
                  {"val_used", val ? val->size() : 0},
                  {"val_clip_ids", val ? val->clip_ids() : std::vector<std::string>{}},
                  {"geometry",
                   {{"num_processes", world}, {"grad_accum", cfg.grad_accum}, {"batch_size", cfg.batch_size},
                    {"n_micro", n_micro}, {"n_train", train.size()}, {"seed", cfg.random.seed}}},
                  {"steps_per_epoch", steps_per_epoch}};
  j["model"] = {{"preset", model.preset()},
                {"family", model.family()},
                {"config", nlohmann::ordered_json::parse(model.config_json())},
                {"n_params", dit_params + cond_params},
                {"n_sem_cond_params", cond_params},
                {"vocab", cfg.vocab},
                {"sem_scale", sem.scale},
                {"n_tensors", model.parameters().size()},
                {"param_groups", {{{"name", "dit"}, {"lr", cfg.lr}, {"n_params", dit_params}},
                                  {{"name", "gc_sem_cond"}, {"lr", cfg.cond_lr}, {"n_params", cond_params}}}}};
  j["env"] = {{"device", device.str()},
              {"gpu", device.is_cuda() ? "cuda" : "none"},
              {"precision", cfg.compute.precision},
              {"torch", TORCH_VERSION},
              {"hostname", host},
              {"world_size", world},
              {"global_batch", world * cfg.batch_size * cfg.grad_accum}};
  return j;
}

const std::vector<std::string>& RunLog::train_columns() {
  static const std::vector<std::string> c = {"step", "loss", "mse", "timestep", "lr", "cond_lr", "grad_norm", "sem_rms",
                                             "x_rms", "text_drop", "cond_drop", "mask_frac", "step_time", "data_time",
                                             "mem_gb", "epoch", "clips", "loss_mean", "mse_mean"};
  return c;
}

const std::vector<std::string>& RunLog::val_columns() {
  static const std::vector<std::string> c = {"step", "timestep", "mse", "mse_uncond", "mse_nulltext",
                                             "gap_uncond", "gap_nulltext", "n"};
  return c;
}

void RunLog::open(const SftConfig& cfg, const nlohmann::ordered_json& facts, int64_t resumed_step) {
  out_ = cfg.output;
  std::filesystem::create_directories(out_);
  // The start-up table: one screen with what this run will do.
  const auto& d = facts["dataset"];
  const auto& m = facts["model"];
  std::printf("+-------------------------- vdt train sft --------------------------\n");
  std::printf("| data      %s  res %s  train %s (of %s, %s dropped)  val %s\n", cfg.data_root.c_str(),
              d["res"].get<std::string>().c_str(), d["train_used"].dump().c_str(), d["train_total"].dump().c_str(),
              d["train_dropped_rows"].dump().c_str(), d["val_used"].dump().c_str());
  std::printf("| model     %s  %s params (%s tensors), gc_sem_cond %s params, vocab %s\n",
              m["preset"].get<std::string>().c_str(), m["n_params"].dump().c_str(), m["n_tensors"].dump().c_str(),
              m["n_sem_cond_params"].dump().c_str(), cfg.vocab.c_str());
  if (m.value("random_init", false))
    std::printf("| weights   RANDOM INIT (--random-init): no base weights, the DiT starts from seed %llu\n",
                static_cast<unsigned long long>(cfg.random.seed));
  for (const auto& w : m.value("weight_files", nlohmann::ordered_json::array()))
    std::printf("| weights   %s  (%s bytes, crc32 %s)\n", w["file"].get<std::string>().c_str(), w["bytes"].dump().c_str(),
                w["crc32"].get<std::string>().c_str());
  // What runs: none / block / selective (with how many blocks keep), FP8 and the fused kernels when not the default.
  std::string ckpt = cfg.checkpointing_mode() == Checkpointing::none ? "none" : cfg.memory.checkpointing;
  if (cfg.checkpointing_mode() == Checkpointing::selective && cfg.memory.selective_blocks >= 0)
    ckpt += " (first " + std::to_string(cfg.memory.selective_blocks) + " blocks)";
  if (cfg.compute.fp8 != "off") ckpt += "  fp8 " + cfg.compute.fp8;
  if (cfg.compute.fused_kernels != "on") ckpt += "  fused-kernels " + cfg.compute.fused_kernels;
  std::printf("| device    %s  precision %s  checkpointing %s  workers %d\n",
              facts["env"]["device"].get<std::string>().c_str(), cfg.compute.precision.c_str(), ckpt.c_str(),
              cfg.num_workers);
  std::printf("| optim     AdamW lr %g (gc_sem_cond %g) wd %g warmup %lld clip %g\n", cfg.lr, cfg.cond_lr,
              cfg.weight_decay, static_cast<long long>(cfg.warmup_steps), cfg.grad_clip);
  std::printf("| schedule  %lld steps, batch %lld x accum %lld, %s micro batches = %s steps per epoch\n",
              static_cast<long long>(cfg.max_steps), static_cast<long long>(cfg.batch_size),
              static_cast<long long>(cfg.grad_accum), d["geometry"]["n_micro"].dump().c_str(),
              d["steps_per_epoch"].dump().c_str());
  std::printf("| outputs   %s  (save every %lld%s, val every %lld at t=%s)\n", out_.c_str(),
              static_cast<long long>(cfg.save_every), cfg.save_state ? " with state" : "",
              static_cast<long long>(cfg.val_every), cfg.val_timesteps.c_str());
  std::printf("| flags     %s\n", changed_fields(cfg, SftConfig::fields()).c_str());
  if (facts.contains("memory_plan"))  // train/plan/startup_plan.h: each choice with its reason, the predictions
    for (const auto& line : facts["memory_plan"]["table"]) std::printf("| %s\n", line.get<std::string>().c_str());
  if (resumed_step > 0) std::printf("| resume    from step %lld (%s)\n", static_cast<long long>(resumed_step),
                                    facts["resume"]["resumed_from"].get<std::string>().c_str());
  std::printf("+-------------------------------------------------------------------\n");
  std::fflush(stdout);
  write_json((std::filesystem::path(out_) /
              (resumed_step > 0 ? "config_resume" + std::to_string(resumed_step) + ".json" : "config.json"))
                 .string(),
             facts);
  prepare_logs({(std::filesystem::path(out_) / "train_log.csv").string(),
                (std::filesystem::path(out_) / "val_log.csv").string()},
               resumed_step, /*jsonl=*/false);
  train_csv_ = std::make_unique<CsvLog>((std::filesystem::path(out_) / "train_log.csv").string(), train_columns());
  val_csv_ = std::make_unique<CsvLog>((std::filesystem::path(out_) / "val_log.csv").string(), val_columns());
  for (const auto* csv : {train_csv_.get(), val_csv_.get()})
    if (csv->rotated()) std::printf("[log] CSV header changed; old file moved to %s\n", csv->rotated()->c_str());
  tb_ = std::make_unique<TbWriter>((std::filesystem::path(out_) / "tensorboard").string());
  // Resumed at step N: steps after N logged before the crash are trained again; mark them stale for TensorBoard
  // (SummaryWriter(purge_step=N + 1)), as the CSVs drop their rows above.
  if (resumed_step > 0) tb_->purge_from(resumed_step + 1);
  // The HParams dashboard: every flag with its value, and the metrics it tabulates beside them.
  tb_->add_hparams(fields_to_json(cfg, SftConfig::fields(), JsonValues::typed), {"train/loss", "val/mse_mean"});
  tb_->flush();
}

void RunLog::preview(int64_t step, const std::string& clip_id, const Png& png) {
  tb_->add_image("preview/" + clip_id, png, step);
  tb_->flush();
}

void RunLog::time_only(double step_time, double data_time) {
  step_times_.push_back(step_time);
  data_times_.push_back(data_time);
}

void RunLog::step(int64_t step, int64_t max_steps, const std::vector<std::pair<std::string, double>>& values,
                  const std::string& clips) {
  std::map<std::string, std::string> row{{"step", std::to_string(step)}, {"clips", clips}};
  std::map<std::string, double> v;
  for (const auto& [k, x] : values) {
    v[k] = x;
    row[k] = fmt_num(x);
    if (k != "epoch" && k != "timestep") tb_->add_scalar("train/" + k, x, step);
  }
  tb_->add_scalar("train/sem_over_x", v["sem_rms"] / std::max(v["x_rms"], 1e-12), step);
  train_csv_->write(row);
  train_csv_->flush();
  tb_->flush();
  time_only(v["step_time"], v["data_time"]);
  const auto [mean_s, mean_d] = mean_times();
  std::printf("step %lld/%lld loss %.4f (mse %.4f t %.0f sem_rms %.3e x_rms %.3f drop t%.0fc%.0fm%.2f) lr %.2e/%.2e "
              "gnorm %s %.2fs (data %.2fs) mem %.1fGB ETA %s\n",
              static_cast<long long>(step), static_cast<long long>(max_steps), v["loss"], v["mse"], v["timestep"],
              v["sem_rms"], v["x_rms"], v["text_drop"], v["cond_drop"], v["mask_frac"], v["lr"], v["cond_lr"],
              fmt_gnorm(v["grad_norm"]).c_str(), v["step_time"], v["data_time"], v["mem_gb"], hms(mean_s * (max_steps - step)).c_str());
  std::fflush(stdout);
}

void RunLog::validation(int64_t step, const std::vector<ValRow>& rows, bool variants) {
  double m = 0, mu = 0, mn = 0, gu = 0, gn = 0;
  std::string line;
  for (const auto& r : rows) {
    // Without the uncond / nulltext variants (--no-val_uncond) only mse is written: the other columns stay empty, as
    // the Python trainer's CsvLog leaves a missing key.
    std::map<std::string, std::string> row = {{"step", std::to_string(step)}, {"timestep", fmt_num(r.timestep)},
                                              {"mse", fmt_num(r.mse)}, {"n", std::to_string(r.n)}};
    if (variants)
      row.insert({{"mse_uncond", fmt_num(r.mse_uncond)}, {"mse_nulltext", fmt_num(r.mse_nulltext)},
                  {"gap_uncond", fmt_num(r.gap_uncond)}, {"gap_nulltext", fmt_num(r.gap_nulltext)}});
    val_csv_->write(row);
    const std::string t = std::to_string(static_cast<int64_t>(std::lround(r.timestep)));
    tb_->add_scalar("val/mse_t" + t, r.mse, step);
    if (variants)
      for (auto [k, x] : {std::pair{"mse_uncond", r.mse_uncond}, {"mse_nulltext", r.mse_nulltext},
                          {"gap_uncond", r.gap_uncond}, {"gap_nulltext", r.gap_nulltext}})
        tb_->add_scalar(std::string("val/") + k + "_t" + t, x, step);
    m += r.mse, mu += r.mse_uncond, mn += r.mse_nulltext, gu += r.gap_uncond, gn += r.gap_nulltext;
    char buf[160];
    if (variants)
      std::snprintf(buf, sizeof buf, " t=%s: mse=%.4f uncond=%.4f null=%.4f (n=%lld)", t.c_str(), r.mse, r.mse_uncond,
                    r.mse_nulltext, static_cast<long long>(r.n));
    else
      std::snprintf(buf, sizeof buf, " t=%s: mse=%.4f (n=%lld)", t.c_str(), r.mse, static_cast<long long>(r.n));
    line += buf;
  }
  const double k = rows.empty() ? 1 : static_cast<double>(rows.size());
  tb_->add_scalar("val/mse_mean", m / k, step);
  if (variants)
    for (auto [name, x] : {std::pair{"mse_uncond", mu}, {"mse_nulltext", mn}, {"gap_uncond", gu}, {"gap_nulltext", gn}})
      tb_->add_scalar(std::string("val/") + name + "_mean", x / k, step);
  val_csv_->flush();
  tb_->flush();
  if (variants)
    std::printf("[val] step %lld%s | mean mse=%.4f gap_uncond=%.4f gap_nulltext=%.4f\n", static_cast<long long>(step),
                line.c_str(), m / k, gu / k, gn / k);
  else
    std::printf("[val] step %lld%s | mean mse=%.4f\n", static_cast<long long>(step), line.c_str(), m / k);
  std::fflush(stdout);
}

std::pair<double, double> RunLog::mean_times() const {
  if (step_times_.empty()) return {0, 0};
  const size_t skip = step_times_.size() > 2 ? 2 : 0;
  double s = 0, d = 0;
  for (size_t i = skip; i < step_times_.size(); ++i) s += step_times_[i], d += data_times_[i];
  const double n = static_cast<double>(step_times_.size() - skip);
  return {s / n, d / n};
}

void RunLog::done(const Done& x) {
  const auto [s, d] = mean_times();
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  nlohmann::ordered_json done = {{"step", x.steps}, {"start_step", x.start_step}, {"peak_mem_gb_main", x.peak_gb_main},
              {"peak_mem_gb_max", x.peak_gb_max}, {"s_per_step_mean", s}, {"data_s_per_step_mean", d},
              {"n_steps_timed", step_times_.size() > 2 ? step_times_.size() - 2 : step_times_.size()},
              {"data_pos", {{"epoch", x.epoch}, {"epoch_micro", x.epoch_micro}}}, {"finished", buf},
              {"peak_mem_gb", x.peak_gb_main}, {"last_export", x.last_export}};
  if (x.predicted_peak_gb > 0) done["peak_mem_gb_predicted"] = x.predicted_peak_gb;
  write_json((std::filesystem::path(out_) / "done.json").string(), done);
  char predicted[48] = "";
  if (x.predicted_peak_gb > 0) std::snprintf(predicted, sizeof predicted, " (predicted %.2f GB)", x.predicted_peak_gb);
  std::printf("[done] step %lld, peak memory %.2f GB%s (largest over the ranks %.2f GB), %.3f s/step (data %.3f "
              "s/step); outputs in %s\n", static_cast<long long>(x.steps), x.peak_gb_main, predicted,
              x.peak_gb_max, s, d, out_.c_str());
}

}  // namespace vdt
