// A run's logs, for both trainers (docs/design.md §4, §5): the start-up table, the files written once at start-up
// (config.json; args.json, val_samples.json), the train and val logs in the format of the trainer's Python
// counterpart (SFT: train_log.csv / val_log.csv with their header; causal: train_log.jsonl / val_log.jsonl, one JSON
// object a line), their trimming on resume and moving aside on a fresh start, TensorBoard under tensorboard/
// (scalars, images, the run's hparams, the purge marker on resume), the console lines, step-time means, done.json.
// Not here: what the values, columns and lines say (each trainer composes them: train/sft/sft_log, the causal trainer).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/csv_log.h"
#include "core/tb_writer.h"

namespace vdt {

// printf into a string: console lines and start-up tables.
std::string string_format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// A gradient norm on the console: 4 significant digits, so 3e-05 reads as 3e-05 and not as 0.000.
std::string fmt_gnorm(double v);

// The train and val logs' file format: `csv` train_log.csv / val_log.csv (a header, numbers as fmt_num, a missing
// key left empty, a changed header moves the old file aside); `jsonl` train_log.jsonl / val_log.jsonl (a row's
// object as nlohmann::json dumps it, keys in sorted order, numbers as JSON numbers, no header).
enum class LogFormat { csv, jsonl };

// What a trainer's logs are: chosen by the trainer, written by RunLog.
struct RunLogSpec {
  std::string dir;  // the run directory (--output, --out)
  LogFormat format = LogFormat::csv;
  std::vector<std::string> train_columns, val_columns;     // the keys a row may hold; a CSV's header, in this order
  std::string table;                                       // the start-up table, printed as given
  std::vector<std::pair<std::string, std::string>> files;  // written once at start-up: name in `dir`, contents
  nlohmann::ordered_json hparams;                          // the HParams dashboard: every flag, typed
  std::vector<std::string> hparam_metrics;                 // the scalar tags it tabulates beside them
};

// A run's logs at start-up: resuming at step N > 0 drops the rows logged after N (a run killed after logging, before
// saving, trains them again); starting at step 0 in a directory that holds an earlier run's rows moves those files
// aside (<stem>.old<N><ext>), so the rows of two runs never mix. Prints a [log] line for what it did.
void prepare_logs(const std::vector<std::string>& paths, int64_t start_step, LogFormat format);

// Rank 0's logs of a run. A row is a JSON object: in a CSV an integer is written as such, a float as fmt_num, a
// string as is; a key outside the file's columns is an error naming it.
class RunLog {
 public:
  using Scalars = std::vector<std::pair<std::string, double>>;  // TensorBoard tag, value

  // Prints the table, writes the files, prepares and opens the train and val logs (prepare_logs at `start_step`),
  // opens the TensorBoard writer: on resume at N > 0 it marks the steps after N stale (SummaryWriter(purge_step=N
  // + 1)), as the logs drop their rows; then the HParams record.
  void open(const RunLogSpec& spec, int64_t start_step);
  // A logged step: `row` appended to the train log, `scalars` to TensorBoard, `console` printed as one line.
  void step(int64_t step, const nlohmann::json& row, const Scalars& scalars, const std::string& console);
  // A validation: `rows` appended to the val log, `scalars` to TensorBoard, `console` printed as one line.
  void validation(int64_t step, const std::vector<nlohmann::json>& rows, const Scalars& scalars,
                  const std::string& console);
  void scalar(const std::string& tag, double value, int64_t step);
  // A TensorBoard image (a preview, already written to disk as PNG by write_step_preview, or a stream's grid).
  void image(const std::string& tag, const Png& png, int64_t step);

  // Every step's times (logged or not) count toward the means.
  void add_time(double step_time, double data_time);
  std::pair<double, double> mean_times() const;  // s/step and data s/step, first 2 steps excluded when possible
  // The time left at the mean s/step, as hh:mm:ss.
  std::string eta(int64_t step, int64_t last_step) const;

  // done.json: the Python SFT trainer's keys (step, start_step, peak_mem_gb_main, peak_mem_gb_max, s_per_step_mean,
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
  void append(const std::string& path, const std::vector<std::string>& columns, CsvLog* csv, const nlohmann::json& row);

  std::string dir_, train_path_, val_path_;
  LogFormat format_ = LogFormat::csv;
  std::vector<std::string> train_columns_, val_columns_;
  std::unique_ptr<CsvLog> train_csv_, val_csv_;
  std::unique_ptr<TbWriter> tb_;
  std::vector<double> step_times_, data_times_;
};

}  // namespace vdt
