// Run logs (run_log.h). A JSON-lines row is appended with one write per line and read back leniently: a torn last
// line (a kill mid-append) is dropped with the rows after the resumed step.
#include "train/loop/run_log.h"

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/atomic_file.h"
#include "core/error.h"

namespace vdt {
namespace {

std::string log_name(LogFormat format, const char* stem) {
  return std::string(stem) + (format == LogFormat::csv ? ".csv" : ".jsonl");
}

// A JSON-lines log's rows through `step`.
void trim_jsonl(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  in.close();
  write_file_atomic(path, kept);
}

// A row's value as a CSV field: integers as such, floats compact (fmt_num), strings as they are.
std::string csv_field(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt_num(v.get<double>());
  if (v.is_number_integer()) return v.dump();
  VDT_FAIL("a CSV log value must be a number or a string, got ", v.dump());
}

}  // namespace

std::string string_format(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string s(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(s.data(), s.size(), fmt, again);
  va_end(again);
  s.resize(static_cast<size_t>(std::max(n, 0)));
  return s;
}

std::string fmt_gnorm(double v) { return string_format("%.4g", v); }

void prepare_logs(const std::vector<std::string>& paths, int64_t start_step, LogFormat format) {
  const bool header = format == LogFormat::csv;
  for (const auto& path : paths) {
    const auto name = std::filesystem::path(path).filename().string();
    if (start_step == 0) {
      const int64_t rows = count_rows(path, header);
      if (rows == 0) continue;
      const auto moved = move_aside(path);
      std::printf(
          "[log] %s held %lld rows of an earlier run in this directory; this run starts at step 0, so they "
          "were moved to %s\n",
          name.c_str(), static_cast<long long>(rows), moved->c_str());
      continue;
    }
    int64_t n = 0;
    if (header) {
      n = CsvLog::keep_rows_through(path, static_cast<double>(start_step));
    } else {
      const int64_t before = count_rows(path, false);
      trim_jsonl(path, start_step);
      n = before - count_rows(path, false);
    }
    if (n > 0)
      std::printf("[log] %s: dropped %lld rows logged after step %lld (they are trained again)\n", name.c_str(),
                  static_cast<long long>(n), static_cast<long long>(start_step));
  }
}

void RunLog::open(const RunLogSpec& spec, int64_t start_step) {
  dir_ = spec.dir, format_ = spec.format;
  train_columns_ = spec.train_columns, val_columns_ = spec.val_columns;
  const std::filesystem::path dir(dir_);
  std::filesystem::create_directories(dir);
  std::fputs(spec.table.c_str(), stdout);
  std::fflush(stdout);
  for (const auto& [name, contents] : spec.files) write_file_atomic((dir / name).string(), contents);
  train_path_ = (dir / log_name(format_, "train_log")).string();
  val_path_ = (dir / log_name(format_, "val_log")).string();
  prepare_logs({train_path_, val_path_}, start_step, format_);
  if (format_ == LogFormat::csv) {
    train_csv_ = std::make_unique<CsvLog>(train_path_, train_columns_);
    val_csv_ = std::make_unique<CsvLog>(val_path_, val_columns_);
    for (const auto* csv : {train_csv_.get(), val_csv_.get()})
      if (csv->rotated()) std::printf("[log] CSV header changed; old file moved to %s\n", csv->rotated()->c_str());
  }
  tb_ = std::make_unique<TbWriter>((dir / "tensorboard").string());
  if (start_step > 0) tb_->purge_from(start_step + 1);
  tb_->add_hparams(spec.hparams, spec.hparam_metrics);
  tb_->flush();
}

void RunLog::append(const std::string& path, const std::vector<std::string>& columns, CsvLog* csv,
                    const nlohmann::json& row) {
  if (csv) {
    std::map<std::string, std::string> fields;
    for (const auto& [k, v] : row.items()) fields[k] = csv_field(v);
    csv->write(fields);  // an unknown column is an error naming it
    return;
  }
  for (const auto& [k, v] : row.items())
    VDT_CHECK(std::find(columns.begin(), columns.end(), k) != columns.end(), path, ": the row's key '", k,
              "' is not one of the log's columns; add it to the trainer's columns");
  std::ofstream(path, std::ios::app) << row.dump() << "\n";
}

void RunLog::step(int64_t step, const nlohmann::json& row, const Scalars& scalars, const std::string& console) {
  for (const auto& [tag, x] : scalars) tb_->add_scalar(tag, x, step);
  append(train_path_, train_columns_, train_csv_.get(), row);
  if (train_csv_) train_csv_->flush();
  tb_->flush();
  std::printf("%s\n", console.c_str());
  std::fflush(stdout);
}

void RunLog::validation(int64_t step, const std::vector<nlohmann::json>& rows, const Scalars& scalars,
                        const std::string& console) {
  for (const auto& row : rows) append(val_path_, val_columns_, val_csv_.get(), row);
  for (const auto& [tag, x] : scalars) tb_->add_scalar(tag, x, step);
  if (val_csv_) val_csv_->flush();
  tb_->flush();
  std::printf("%s\n", console.c_str());
  std::fflush(stdout);
}

void RunLog::scalar(const std::string& tag, double value, int64_t step) {
  tb_->add_scalar(tag, value, step);
  tb_->flush();
}

void RunLog::image(const std::string& tag, const Png& png, int64_t step) {
  tb_->add_image(tag, png, step);
  tb_->flush();
}

void RunLog::add_time(double step_time, double data_time) {
  step_times_.push_back(step_time);
  data_times_.push_back(data_time);
}

std::pair<double, double> RunLog::mean_times() const {
  if (step_times_.empty()) return {0, 0};
  const size_t skip = step_times_.size() > 2 ? 2 : 0;
  double s = 0, d = 0;
  for (size_t i = skip; i < step_times_.size(); ++i) s += step_times_[i], d += data_times_[i];
  const double n = static_cast<double>(step_times_.size() - skip);
  return {s / n, d / n};
}

std::string RunLog::eta(int64_t step, int64_t last_step) const {
  const auto t = static_cast<int64_t>(mean_times().first * static_cast<double>(last_step - step));
  return string_format("%02lld:%02lld:%02lld", static_cast<long long>(t / 3600), static_cast<long long>(t / 60 % 60),
                       static_cast<long long>(t % 60));
}

void RunLog::done(const Done& x) {
  const auto [s, d] = mean_times();
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  nlohmann::ordered_json j = {{"step", x.steps},
                              {"start_step", x.start_step},
                              {"peak_mem_gb_main", x.peak_gb_main},
                              {"peak_mem_gb_max", x.peak_gb_max},
                              {"s_per_step_mean", s},
                              {"data_s_per_step_mean", d},
                              {"n_steps_timed", step_times_.size() > 2 ? step_times_.size() - 2 : step_times_.size()},
                              {"data_pos", {{"epoch", x.epoch}, {"epoch_micro", x.epoch_micro}}},
                              {"finished", buf},
                              {"peak_mem_gb", x.peak_gb_main},
                              {"last_export", x.last_export}};
  if (x.predicted_peak_gb > 0) j["peak_mem_gb_predicted"] = x.predicted_peak_gb;
  write_file_atomic((std::filesystem::path(dir_) / "done.json").string(), j.dump(2) + "\n");
  char predicted[48] = "";
  if (x.predicted_peak_gb > 0) std::snprintf(predicted, sizeof predicted, " (predicted %.2f GB)", x.predicted_peak_gb);
  std::printf(
      "[done] step %lld, peak memory %.2f GB%s (largest over the ranks %.2f GB), %.3f s/step (data %.3f "
      "s/step); outputs in %s\n",
      static_cast<long long>(x.steps), x.peak_gb_main, predicted, x.peak_gb_max, s, d, dir_.c_str());
}

}  // namespace vdt
