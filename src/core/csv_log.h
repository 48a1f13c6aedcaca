// Append-only CSV logs (train_log.csv, val_log.csv; docs/design.md §4). A resumed run appends under the same header;
// when the columns changed (a code upgrade), the old file is moved aside to <stem>.old<N>.csv so rows never land under
// a header that does not describe them (the Python trainer's rotate_csv_if_header_changed). Not a CSV reader.
#pragma once
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vdt {

class CsvLog {
 public:
  // Opens `path` for append, writing the header when the file is new or empty. If it exists with a different header
  // line, it is first moved aside to <stem>.old<N><ext> (first free N); rotated() then names the moved file.
  CsvLog(const std::string& path, std::vector<std::string> columns);
  ~CsvLog();
  CsvLog(const CsvLog&) = delete;
  CsvLog& operator=(const CsvLog&) = delete;

  // One row; missing columns are written empty, an unknown column is an error naming it and the file.
  void write(const std::map<std::string, std::string>& row);
  // One row, values in column order; a size mismatch is an error.
  void write_values(const std::vector<std::string>& values);
  // Rows reach the OS at every write (tail -f works, a crash loses none); flush() adds fsync.
  void flush();

  // For a resumed run: rewrites the file at `path` (if any) keeping the header and the rows whose first column is a
  // number <= max_first (a run that crashed after its last saved state logged steps the resumed run will log
  // again). Returns how many rows were dropped. Call before opening the log.
  static int64_t keep_rows_through(const std::string& path, double max_first);

  const std::optional<std::string>& rotated() const { return rotated_; }
  const std::string& path() const { return path_; }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  void write_line(const std::string& line);

  std::string path_;
  std::vector<std::string> columns_;
  std::optional<std::string> rotated_;
  FILE* file_ = nullptr;
};

// Moves the file at `path` aside to <stem>.old<N><ext> (the first free N); nullopt when there is no file. A fresh
// run in a directory that holds an earlier run's logs starts its own (the rows would otherwise mix two runs).
std::optional<std::string> move_aside(const std::string& path);
// Data rows of a log: the lines after the CSV header, or every line of a JSON-lines file (`has_header` false).
int64_t count_rows(const std::string& path, bool has_header);

// Quotes a field (doubling inner quotes) when it holds a comma, a quote, CR or LF (RFC 4180).
std::string csv_escape(const std::string& s);
// Compact number: printf %.6g, with non-finite values spelled "nan", "inf", "-inf".
std::string fmt_num(double v);

}  // namespace vdt
