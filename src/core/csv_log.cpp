// CsvLog: header check and rotation on open, then line-at-a-time appends. The header comparison is on the exact
// first line, so a change of column order or names rotates too, as in the Python trainer (which compares the split
// fields).
#include "core/csv_log.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace vdt {
namespace {

std::string join_escaped(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) line += ',';
    line += csv_escape(fields[i]);
  }
  return line;
}

}  // namespace

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string fmt_num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::optional<std::string> move_aside(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  const fs::path p(path);
  const std::string stem = (p.parent_path() / p.stem()).string();
  std::string moved;
  for (int n = 0;; ++n) {
    moved = stem + ".old" + std::to_string(n) + p.extension().string();
    if (!fs::exists(fs::symlink_status(moved, ec))) break;
  }
  VDT_CHECK_SYS(::rename(path.c_str(), moved.c_str()), "cannot move ", path, " aside to ", moved);
  return moved;
}

int64_t count_rows(const std::string& path, bool has_header) {
  std::ifstream in(path);
  if (!in) return 0;
  int64_t n = 0;
  std::string line;
  if (has_header) std::getline(in, line);
  while (std::getline(in, line))
    if (line.find_first_not_of(" \r") != std::string::npos) ++n;
  return n;
}

int64_t CsvLog::keep_rows_through(const std::string& path, double max_first) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return 0;
  std::ifstream in(path);
  VDT_CHECK(in.good(), path, ": cannot read");
  std::string header, line, kept;
  std::getline(in, header);
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const std::string first = line.substr(0, line.find(','));
    char* end = nullptr;
    const double v = std::strtod(first.c_str(), &end);
    if (end != first.c_str() && v > max_first) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped == 0) return 0;
  write_file_atomic(path, header + "\n" + kept);
  return dropped;
}

CsvLog::CsvLog(const std::string& path, std::vector<std::string> columns) : path_(path), columns_(std::move(columns)) {
  VDT_CHECK(!columns_.empty(), path_, ": a CSV log needs at least one column");
  std::set<std::string> seen;
  for (const auto& c : columns_) VDT_CHECK(seen.insert(c).second, path_, ": duplicate column '", c, "'");
  const std::string header = join_escaped(columns_);

  std::error_code ec;
  const bool has_content = fs::is_regular_file(path_, ec) && fs::file_size(path_, ec) > 0 && !ec;
  bool ends_in_newline = true;
  if (has_content) {
    std::ifstream in(path_, std::ios::binary);
    VDT_CHECK(in, path_, ": cannot read the existing CSV log (", std::strerror(errno), ")");
    std::string first;
    std::getline(in, first);
    if (!first.empty() && first.back() == '\r') first.pop_back();
    if (first != header) {
      rotated_ = move_aside(path_);
    } else {
      // A crash mid-row leaves a partial last line; start the next row on a fresh line instead of gluing onto it.
      in.clear();
      in.seekg(-1, std::ios::end);
      char last = '\n';
      in.get(last);
      ends_in_newline = last == '\n';
    }
  }
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) VDT_CHECK_SYS(-1, path_, ": cannot open the CSV log for append");
  if (!has_content || rotated_)
    write_line(header);
  else if (!ends_in_newline)
    write_line("");
}

CsvLog::~CsvLog() {
  if (file_ && std::fclose(file_) != 0)
    std::cerr << "[vdt] warning: " << path_ << ": close failed: " << std::strerror(errno) << "\n";
}

void CsvLog::write(const std::map<std::string, std::string>& row) {
  for (const auto& [k, v] : row) {
    bool known = false;
    for (const auto& c : columns_) known = known || c == k;
    VDT_CHECK(known, path_, ": unknown column '", k, "' (columns: ", join_escaped(columns_), ")");
  }
  std::vector<std::string> values;
  values.reserve(columns_.size());
  for (const auto& c : columns_) {
    const auto it = row.find(c);
    values.push_back(it == row.end() ? "" : it->second);
  }
  write_values(values);
}

void CsvLog::write_values(const std::vector<std::string>& values) {
  VDT_CHECK(values.size() == columns_.size(), path_, ": row has ", values.size(), " values, the header has ",
            columns_.size(), " columns (", join_escaped(columns_), ")");
  write_line(join_escaped(values));
}

void CsvLog::write_line(const std::string& line) {
  const std::string s = line + "\n";
  if (std::fwrite(s.data(), 1, s.size(), file_) != s.size() || std::fflush(file_) != 0)
    VDT_CHECK_SYS(-1, path_, ": write failed (disk full?)");
}

void CsvLog::flush() {
  VDT_CHECK_SYS(std::fflush(file_) == 0 ? 0 : -1, path_, ": flush failed (disk full?)");
  VDT_CHECK_SYS(::fsync(::fileno(file_)), path_, ": fsync failed (disk full?)");
}

}  // namespace vdt
