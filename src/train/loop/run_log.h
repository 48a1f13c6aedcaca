// The SFT run's logs (docs/design.md §4): the start-up configuration table, config.json, train_log.csv (17 columns),
// val_log.csv, TensorBoard under tensorboard/ (scalars, the run's hparams, preview images), one console line per
// logged step with ETA, done.json.
// Not here: what the numbers mean (the trainer computes them).
#pragma once
#include <torch/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/csv_log.h"
#include "core/tb_writer.h"
#include "train/sft/sft_config.h"
#include "train/eval/validation.h"

namespace vdt {

class SftDataset;
class Denoiser;
struct SemCondConfig;

// Facts for config.json and the start-up table: dataset counts, val clip ids, geometry, model, groups, environment.
nlohmann::ordered_json run_facts(const SftConfig& cfg, const SftDataset& train, const SftDataset* val,
                                 const Denoiser& model, const SemCondConfig& sem, int64_t n_micro,
                                 int64_t steps_per_epoch,
                                 const torch::Device& device, int64_t cond_params, int64_t dit_params, int world = 1);

// JSON-lines logs (the causal trainer's train_log.jsonl, val_log.jsonl): one object per line, appended; on resume the
// lines after the resumed step are dropped (a run killed after logging, before saving, trains them again).
// A gradient norm on the console: 4 significant digits, so 3e-05 reads as 3e-05 and not as 0.000.
std::string fmt_gnorm(double v);

void append_jsonl(const std::string& path, const nlohmann::json& row);
void trim_jsonl(const std::string& path, int64_t step);

// A run's logs at start-up (both trainers): resuming at step N > 0 drops the rows logged after N (a run killed after
// logging, before saving, trains them again); starting at step 0 in a directory that holds an earlier run's rows
// moves those files aside (<stem>.old<N><ext>), so the rows of two runs never mix. `jsonl`: JSON-lines files (no
// header). Prints a [log] line for what it did.
void prepare_logs(const std::vector<std::string>& paths, int64_t start_step, bool jsonl);

class RunLog {
 public:
  static const std::vector<std::string>& train_columns();
  static const std::vector<std::string>& val_columns();
  // Prints the table, writes config.json (config_resume<N>.json when resuming at step N > 0), opens the CSVs
  // (rotating a changed header; on resume dropping rows logged after step N) and the TensorBoard writer.
  void open(const SftConfig& cfg, const nlohmann::ordered_json& facts, int64_t resumed_step = 0);
  void step(int64_t step, int64_t max_steps, const std::vector<std::pair<std::string, double>>& values,
            const std::string& clips);
  void time_only(double step_time, double data_time);
  // `variants`: the uncond / nulltext rows were run (--val_uncond); without them only mse is logged.
  void validation(int64_t step, const std::vector<ValRow>& rows, bool variants);
  // A validation step's sample preview: TensorBoard image "preview/<clip_id>" at `step` (the PNG of
  // write_step_preview, already on disk).
  void preview(int64_t step, const std::string& clip_id, const Png& png);
  std::pair<double, double> mean_times() const;  // s/step and data s/step, first 2 steps excluded when possible
  // done.json: the Python trainer's keys (step, start_step, peak_mem_gb_main, peak_mem_gb_max, s_per_step_mean,
  // data_s_per_step_mean, n_steps_timed, data_pos, finished) plus ours (peak_mem_gb, last_export, and with a memory
  // plan peak_mem_gb_predicted).
  struct Done {
    int64_t steps = 0, start_step = 0;
    double peak_gb_main = 0, peak_gb_max = 0;  // this process's peak; the largest over the ranks
    int64_t epoch = 0, epoch_micro = 0;        // the data position after the last step
    std::string last_export;
    double predicted_peak_gb = 0;  // the memory plan's (0: no plan; then done.json has no peak_mem_gb_predicted)
  };
  void done(const Done& d);

 private:
  std::string out_;
  std::unique_ptr<CsvLog> train_csv_, val_csv_;
  std::unique_ptr<TbWriter> tb_;
  std::vector<double> step_times_, data_times_;
};

}  // namespace vdt
