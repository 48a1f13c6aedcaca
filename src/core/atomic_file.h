// Crash-safe file writes, the one implementation every writer uses (safetensors, state slots, PNGs, logs rewritten on
// resume, JSON run files, synthetic roots): the bytes go to `<path>.tmp.<pid>`, are fsynced, the temp file is
// renamed over `path` and the directory fsynced, so a reader — or a resumed run — sees the old file or the new one,
// never a torn one. On failure the temp file is removed and the error names the file, the call and errno (a full disk
// says so). Not here: appending logs (csv_log, tb_writer fsync their own appends).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace vdt {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path, mode_t mode = 0644);  // creates the temp file
  ~AtomicFile();                                              // removes the temp file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // fsync and close, then (after `fault` when given: core/fault.h) rename over the path and fsync the directory.
  void commit(const char* fault = nullptr);
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool done_ = false;
};

void write_file_atomic(const std::string& path, std::string_view content);

}  // namespace vdt
