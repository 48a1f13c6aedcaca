// safetensors I/O (format: huggingface/safetensors README): mmap'ed reader with lazy per-tensor access, a reader over
// several files as one set, and an atomic writer (temp file, fsync, rename, mode 644) that lays tensors out as the
// reference writer does (header padded to 8 bytes, tensors sorted by alignment then name, no holes).
// Every structural problem in a file is a vdt::Error naming the file and the key. Not here: model key mapping.
#pragma once
#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace vdt {

using Metadata = std::map<std::string, std::string>;

struct TensorEntry {
  std::string dtype;  // safetensors dtype string, e.g. "BF16"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data buffer
};

// torch dtype for a safetensors dtype string; throws (naming `where`) for types torch cannot hold (F4, F6_*).
at::ScalarType scalar_type_of(const std::string& st_dtype, const std::string& where);
// safetensors dtype string for a torch dtype.
std::string st_dtype_of(at::ScalarType t);

class SafetensorsFile {
 public:
  // Maps the file and validates its header completely; tensors are read lazily by get().
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  std::vector<std::string> keys() const;  // sorted
  bool contains(const std::string& key) const { return entries_.count(key) != 0; }
  const TensorEntry& entry(const std::string& key) const;
  const Metadata& metadata() const { return metadata_; }
  // A CPU tensor over the mapped bytes (read-only: clone before writing into it). Copies when the offset is not
  // aligned to the element size.
  torch::Tensor get(const std::string& key) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::map<std::string, TensorEntry> entries_;
  Metadata metadata_;
  std::shared_ptr<void> mapping_;  // keeps the mmap alive while any tensor view exists
  const uint8_t* data_ = nullptr;  // start of the data buffer
  size_t data_size_ = 0;
};

// Several files read as one (sharded checkpoints). A key present in two files is an error naming both.
class SafetensorsSet {
 public:
  static SafetensorsSet open(const std::vector<std::string>& paths);
  std::vector<std::string> keys() const;  // sorted
  bool contains(const std::string& key) const { return owner_.count(key) != 0; }
  const TensorEntry& entry(const std::string& key) const;
  torch::Tensor get(const std::string& key) const;
  const std::string& file_of(const std::string& key) const;
  // Metadata of the first file that has any (sharded checkpoints repeat it).
  const Metadata& metadata() const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> owner_;
  Metadata empty_;
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;  // (checkpoint name, tensor)

// Writes tensors (any device; copied to CPU contiguous) to `path` atomically: temp file beside it, fsync, rename,
// fsync of the directory, mode 0644. On any failure the temp file is removed and an existing `path` is untouched.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const Metadata& metadata = {});

// A metadata value (always a string in safetensors) as a number: `dflt` when the key is absent; an error naming
// `file` and the key when the value is not a whole number (metadata_int) or a finite number (metadata_double).
int64_t metadata_int(const Metadata& m, const std::string& key, const std::string& file, int64_t dflt);
double metadata_double(const Metadata& m, const std::string& key, const std::string& file, double dflt);

}  // namespace vdt
