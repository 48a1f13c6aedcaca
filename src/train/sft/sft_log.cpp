// The SFT run's log contents (sft_log.h): the start-up table and facts, the rows, tags and console lines.
#include "train/sft/sft_log.h"

#include <sys/utsname.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "data/sft_dataset.h"
#include "model/denoiser.h"
#include "model/sem_cond.h"
#include "train/loop/config_fields.h"

namespace vdt {
namespace {

// The start-up table: one screen with what this run will do.
std::string startup_table(const SftConfig& cfg, const MemoryKnobs& knobs, const nlohmann::ordered_json& facts,
                          int64_t resumed_step) {
  const auto& d = facts["dataset"];
  const auto& m = facts["model"];
  std::string t = "+-------------------------- vdt train sft --------------------------\n";
  t += string_format("| data      %s  res %s  train %s (of %s, %s dropped)  val %s\n", cfg.data_root.c_str(),
                     d["res"].get<std::string>().c_str(), d["train_used"].dump().c_str(),
                     d["train_total"].dump().c_str(), d["train_dropped_rows"].dump().c_str(),
                     d["val_used"].dump().c_str());
  t += string_format("| model     %s  %s params (%s tensors), gc_sem_cond %s params, vocab %s\n",
                     m["preset"].get<std::string>().c_str(), m["n_params"].dump().c_str(),
                     m["n_tensors"].dump().c_str(), m["n_sem_cond_params"].dump().c_str(), cfg.vocab.c_str());
  if (m.value("random_init", false))
    t += string_format("| weights   RANDOM INIT (--random-init): no base weights, the DiT starts from seed %llu\n",
                       static_cast<unsigned long long>(cfg.random.seed));
  for (const auto& w : m.value("weight_files", nlohmann::ordered_json::array()))
    t += string_format("| weights   %s  (%s bytes, crc32 %s)\n", w["file"].get<std::string>().c_str(),
                       w["bytes"].dump().c_str(), w["crc32"].get<std::string>().c_str());
  // What runs: none / block / selective (with how many blocks keep), FP8 and the fused kernels when not the default.
  std::string ckpt = checkpointing_name(knobs.checkpointing);
  if (knobs.checkpointing == Checkpointing::selective && knobs.selective_blocks >= 0)
    ckpt += " (first " + std::to_string(knobs.selective_blocks) + " blocks)";
  if (cfg.compute.fp8 != "off") ckpt += "  fp8 " + cfg.compute.fp8;
  if (cfg.compute.fused_kernels != "on") ckpt += "  fused-kernels " + cfg.compute.fused_kernels;
  t += string_format("| device    %s  precision %s  checkpointing %s  workers %d\n",
                     facts["env"]["device"].get<std::string>().c_str(), precision_name(knobs.precision), ckpt.c_str(),
                     cfg.num_workers);
  if (facts["env"].contains("precision_choice"))
    t += "| precision " + facts["env"]["precision_choice"].get<std::string>() + "\n";
  t += string_format("| optim     AdamW lr %g (gc_sem_cond %g) wd %g warmup %lld clip %g\n", cfg.lr, cfg.cond_lr,
                     cfg.weight_decay, static_cast<long long>(cfg.warmup_steps), cfg.grad_clip);
  t += string_format("| schedule  %lld steps, batch %lld x accum %lld, %s micro batches = %s steps per epoch\n",
                     static_cast<long long>(cfg.max_steps), static_cast<long long>(cfg.batch_size),
                     static_cast<long long>(cfg.grad_accum), d["geometry"]["n_micro"].dump().c_str(),
                     d["steps_per_epoch"].dump().c_str());
  t += string_format("| outputs   %s  (save every %lld%s, val every %lld at t=%s)\n", cfg.output.c_str(),
                     static_cast<long long>(cfg.save_every), cfg.save_state ? " with state" : "",
                     static_cast<long long>(cfg.val_every), cfg.val_timesteps.c_str());
  t += string_format("| flags     %s\n", changed_fields(cfg, SftConfig::fields()).c_str());
  if (facts.contains("memory_plan"))  // train/plan/startup_plan.h: each choice with its reason, the predictions
    for (const auto& line : facts["memory_plan"]["table"]) t += "| " + line.get<std::string>() + "\n";
  if (resumed_step > 0)
    t += string_format("| resume    from step %lld (%s)\n", static_cast<long long>(resumed_step),
                       facts["resume"]["resumed_from"].get<std::string>().c_str());
  return t + "+-------------------------------------------------------------------\n";
}

// The process's command line as the Python trainer's sys.argv: one string per argument.
std::vector<std::string> process_argv() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> out;
  for (std::string a; std::getline(f, a, '\0');) out.push_back(a);
  return out;
}

// Python's platform.platform() in spirit: the kernel's name, release and machine.
std::string platform_name() {
  struct utsname u {};
  if (uname(&u) != 0) return "";
  return std::string(u.sysname) + "-" + u.release + "-" + u.machine;
}

std::string local_time_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tm);
  return b;
}

}  // namespace

nlohmann::ordered_json run_facts(const SftConfig& cfg, const SftDataset& train, const SftDataset* val,
                                 const Denoiser& model, const SemCondConfig& sem, int64_t n_micro,
                                 int64_t steps_per_epoch, const torch::Device& device, int64_t cond_params,
                                 int64_t dit_params, int world) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  nlohmann::ordered_json j;
  j["args"] = nlohmann::ordered_json::parse(cfg.to_json());
  j["args"]["val_timesteps"] = cfg.val_timestep_list();  // a list of floats, as the Python trainer's parse_args
  j["res"] = cfg.res;                                    // the Python trainer's top-level key
  j["dataset"] = {{"root", cfg.data_root},
                  {"res", train.info().res},
                  {"train_total", train.n_total()},
                  {"train_dropped_rows", train.n_dropped()},
                  {"train_used", train.size()},
                  {"text_table_rows", train.text_table()->size()},
                  {"val_used", val ? val->size() : 0},
                  {"val_clip_ids", val ? val->clip_ids() : std::vector<std::string>{}},
                  {"geometry",
                   {{"num_processes", world},
                    {"grad_accum", cfg.grad_accum},
                    {"batch_size", cfg.batch_size},
                    {"n_micro", n_micro},
                    {"n_train", train.size()},
                    {"seed", cfg.random.seed}}},
                  {"steps_per_epoch", steps_per_epoch}};
  j["model"] = {{"preset", model.preset()},
                {"family", model.family()},
                {"config", nlohmann::ordered_json::parse(model.config_json())},
                {"n_params", dit_params + cond_params},
                {"n_sem_cond_params", cond_params},
                {"vocab", cfg.vocab},
                {"sem_cond_in_channels", sem.vocab_size},  // the adapter's one-hot input: one channel per id
                {"sem_scale", sem.scale},
                {"n_tensors", model.parameters().size()},
                {"param_groups",
                 {{{"name", "dit"}, {"lr", cfg.lr}, {"n_params", dit_params}},
                  {{"name", "gc_sem_cond"}, {"lr", cfg.cond_lr}, {"n_params", cond_params}}}}};
  auto keys = nlohmann::ordered_json::array();  // what every step-N.safetensors holds (export_checkpoint)
  for (const auto& kv : model.named_parameters()) keys.push_back(kv.key());
  j["model"]["export_keys"] = keys;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  j["env"] = {{"device", device.str()},
              {"gpu", device.is_cuda() ? "cuda" : "none"},
              {"precision", cfg.compute.precision},
              {"torch", TORCH_VERSION},
              {"hostname", host},
              {"world_size", world},
              {"global_batch", world * cfg.batch_size * cfg.grad_accum},
              // the Python trainer's keys: accelerate's word for the precision (bf16 autocast over float32 masters,
              // or "no"), its interpreter (none here), the machine, the command line and the start
              {"mixed_precision", cfg.precision_mode() == Precision::mixed ? "bf16" : "no"},
              {"python", ""},
              {"platform", platform_name()},
              {"argv", process_argv()},
              {"started", local_time_now()},
              {"cuda_visible_devices", visible ? nlohmann::ordered_json(visible) : nlohmann::ordered_json()}};
  return j;
}

const std::vector<std::string>& sft_train_columns() {
  static const std::vector<std::string> c = {"step",      "loss",      "mse",       "timestep",  "lr",
                                             "cond_lr",   "grad_norm", "sem_rms",   "x_rms",     "text_drop",
                                             "cond_drop", "mask_frac", "step_time", "data_time", "mem_gb",
                                             "epoch",     "clips",     "loss_mean", "mse_mean"};
  return c;
}

const std::vector<std::string>& sft_val_columns() {
  static const std::vector<std::string> c = {"step",         "timestep",   "mse",          "mse_uncond",
                                             "mse_nulltext", "gap_uncond", "gap_nulltext", "n"};
  return c;
}

RunLogSpec sft_log_spec(const SftConfig& cfg, const MemoryKnobs& knobs, const nlohmann::ordered_json& facts,
                        int64_t resumed_step) {
  RunLogSpec s;
  s.dir = cfg.output, s.format = LogFormat::csv;
  s.train_columns = sft_train_columns(), s.val_columns = sft_val_columns();
  s.table = startup_table(cfg, knobs, facts, resumed_step);
  s.files = {{resumed_step > 0 ? "config_resume" + std::to_string(resumed_step) + ".json" : "config.json",
              facts.dump(2) + "\n"}};
  s.hparams = fields_to_json(cfg, SftConfig::fields(), JsonValues::typed);
  s.hparam_metrics = {"train/loss", "val/mse_mean"};
  return s;
}

void log_sft_step(RunLog& log, int64_t step, int64_t max_steps,
                  const std::vector<std::pair<std::string, double>>& values, const std::string& clips) {
  nlohmann::json row = {{"step", step}, {"clips", clips}};
  RunLog::Scalars scalars;
  std::map<std::string, double> v;
  for (const auto& [k, x] : values) {
    v[k] = x;
    row[k] = x;
    if (k != "epoch" && k != "timestep") scalars.emplace_back("train/" + k, x);
  }
  scalars.emplace_back("train/sem_over_x", v["sem_rms"] / std::max(v["x_rms"], 1e-12));
  log.step(step, row, scalars,
           string_format("step %lld/%lld loss %.4f (mse %.4f t %.0f sem_rms %.3e x_rms %.3f drop t%.0fc%.0fm%.2f) "
                         "lr %.2e/%.2e gnorm %s %.2fs (data %.2fs) mem %.1fGB ETA %s",
                         static_cast<long long>(step), static_cast<long long>(max_steps), v["loss"], v["mse"],
                         v["timestep"], v["sem_rms"], v["x_rms"], v["text_drop"], v["cond_drop"], v["mask_frac"],
                         v["lr"], v["cond_lr"], fmt_gnorm(v["grad_norm"]).c_str(), v["step_time"], v["data_time"],
                         v["mem_gb"], log.eta(step, max_steps).c_str()));
}

void log_sft_validation(RunLog& log, int64_t step, const std::vector<ValRow>& rows, bool variants) {
  double m = 0, mu = 0, mn = 0, gu = 0, gn = 0;
  std::vector<nlohmann::json> out;
  RunLog::Scalars scalars;
  std::string line;
  for (const auto& r : rows) {
    // Without the uncond / nulltext variants (--no-val_uncond) only mse is written: the other columns stay empty, as
    // the Python trainer's CsvLog leaves a missing key.
    nlohmann::json row = {{"step", step}, {"timestep", r.timestep}, {"mse", r.mse}, {"n", r.n}};
    const std::string t = std::to_string(static_cast<int64_t>(std::lround(r.timestep)));
    scalars.emplace_back("val/mse_t" + t, r.mse);
    if (variants)
      for (auto [k, x] : {std::pair{"mse_uncond", r.mse_uncond},
                          {"mse_nulltext", r.mse_nulltext},
                          {"gap_uncond", r.gap_uncond},
                          {"gap_nulltext", r.gap_nulltext}}) {
        row[k] = x;
        scalars.emplace_back(std::string("val/") + k + "_t" + t, x);
      }
    out.push_back(row);
    m += r.mse, mu += r.mse_uncond, mn += r.mse_nulltext, gu += r.gap_uncond, gn += r.gap_nulltext;
    if (variants)
      line += string_format(" t=%s: mse=%.4f uncond=%.4f null=%.4f (n=%lld)", t.c_str(), r.mse, r.mse_uncond,
                            r.mse_nulltext, static_cast<long long>(r.n));
    else
      line += string_format(" t=%s: mse=%.4f (n=%lld)", t.c_str(), r.mse, static_cast<long long>(r.n));
  }
  const double k = rows.empty() ? 1 : static_cast<double>(rows.size());
  scalars.emplace_back("val/mse_mean", m / k);
  if (variants)
    for (auto [name, x] : {std::pair{"mse_uncond", mu}, {"mse_nulltext", mn}, {"gap_uncond", gu}, {"gap_nulltext", gn}})
      scalars.emplace_back(std::string("val/") + name + "_mean", x / k);
  log.validation(
      step, out, scalars,
      variants ? string_format("[val] step %lld%s | mean mse=%.4f gap_uncond=%.4f gap_nulltext=%.4f",
                               static_cast<long long>(step), line.c_str(), m / k, gu / k, gn / k)
               : string_format("[val] step %lld%s | mean mse=%.4f", static_cast<long long>(step), line.c_str(), m / k));
}

Metadata sft_export_metadata(const SftConfig& cfg, const Denoiser& model, const SftExportFacts& f, int64_t step) {
  Metadata m;
  m["format"] = "pt";
  m["trainer"] = "vdt train sft";
  m["stage"] = "sft_bidirectional";
  m["vocab"] = cfg.vocab;
  m["data"] = f.data_format;  // the Python trainer writes its dataset's name ("v10"); vdt the root's format
  m["res"] = cfg.res;
  m["step"] = std::to_string(step);
  m["data_root"] = cfg.data_root;
  m["cond_type"] = cfg.cond_type;
  m["cond_key"] = cfg.cond_key;
  m["text_dropout"] = py_float(cfg.text_dropout);
  m["cond_dropout"] = py_float(cfg.cond_dropout);
  m["mask_p"] = py_float(cfg.mask_p);
  m["lr"] = py_float(cfg.lr);
  m["cond_lr"] = py_float(cfg.cond_lr);
  m["weight_decay"] = py_float(cfg.weight_decay);
  m["warmup_steps"] = std::to_string(cfg.warmup_steps);
  m["model_dir"] = cfg.model_dir;
  m["sem_scale"] = std::to_string(f.sem.scale);
  m["sem_hidden"] = std::to_string(f.sem.hidden);
  m["model_config"] = model.config_json();
  m["init_ckpt"] = f.init_ckpt;
  m["resumed_from"] = f.resumed_from;
  m["resumed_step"] = std::to_string(f.resumed_step);
  m["hyperparameters"] = cfg.to_json();
  m["first_frame_cond"] = cfg.first_frame_cond ? "True" : "False";
  m["seed"] = std::to_string(cfg.random.seed);
  return m;
}

}  // namespace vdt
