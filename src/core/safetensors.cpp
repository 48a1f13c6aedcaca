// safetensors reader and writer. Validation follows the reference implementation (safetensors/src/tensor.rs):
// header length within the file and <= 100 MB, JSON object, no duplicate keys, `__metadata__` string->string,
// offsets inside the buffer, byte size == numel x dtype size, and no overlaps or holes between tensors.
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fault.h"

namespace vdt {
namespace {

constexpr uint64_t kMaxHeader = 100'000'000;

struct DtypeInfo {
  const char* name;
  int bits;
  std::optional<at::ScalarType> torch;  // nullopt: torch has no such type
};

const std::vector<DtypeInfo>& dtype_table() {
  static const std::vector<DtypeInfo> table = {
      {"BOOL", 8, at::kBool},
      {"U8", 8, at::kByte},
      {"I8", 8, at::kChar},
      {"I16", 16, at::kShort},
      {"U16", 16, at::kUInt16},
      {"F16", 16, at::kHalf},
      {"BF16", 16, at::kBFloat16},
      {"I32", 32, at::kInt},
      {"U32", 32, at::kUInt32},
      {"F32", 32, at::kFloat},
      {"F64", 64, at::kDouble},
      {"C64", 64, at::kComplexFloat},
      {"I64", 64, at::kLong},
      {"U64", 64, at::kUInt64},
      {"F8_E5M2", 8, at::kFloat8_e5m2},
      {"F8_E4M3", 8, at::kFloat8_e4m3fn},
      {"F8_E8M0", 8, at::kFloat8_e8m0fnu},
      {"F8_E4M3FNUZ", 8, at::kFloat8_e4m3fnuz},
      {"F8_E5M2FNUZ", 8, at::kFloat8_e5m2fnuz},
      {"F4", 4, std::nullopt},
      {"F6_E2M3", 6, std::nullopt},
      {"F6_E3M2", 6, std::nullopt},
  };
  return table;
}

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : dtype_table())
    if (name == d.name) return &d;
  return nullptr;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && size) munmap(addr, size);
  }
};

TensorEntry parse_entry(const std::string& path, const std::string& key, const nlohmann::json& v,
                        uint64_t buffer_size) {
  const std::string where = path + ": tensor '" + key + "'";
  VDT_CHECK(v.is_object(), where, ": header entry is not an object");
  VDT_CHECK(v.contains("dtype") && v["dtype"].is_string(), where, ": missing string field 'dtype'");
  VDT_CHECK(v.contains("shape") && v["shape"].is_array(), where, ": missing array field 'shape'");
  VDT_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2, where,
            ": 'data_offsets' must be [begin, end]");
  TensorEntry e;
  e.dtype = v["dtype"].get<std::string>();
  const DtypeInfo* info = find_dtype(e.dtype);
  VDT_CHECK(info, where, ": unknown dtype '", e.dtype, "'");
  uint64_t numel = 1;
  for (const auto& d : v["shape"]) {
    VDT_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where,
              ": shape entries must be non-negative integers, got ", v["shape"].dump());
    VDT_CHECK(d.is_number_integer() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) &&
                  !__builtin_mul_overflow(numel, d.get<uint64_t>(), &numel),
              where, ": shape ", v["shape"].dump(), " has more elements than 64 bits count; the header is corrupt");
    e.shape.push_back(d.get<int64_t>());
  }
  for (const auto& o : v["data_offsets"])
    VDT_CHECK(o.is_number_unsigned() || (o.is_number_integer() && o.get<int64_t>() >= 0), where,
              ": data_offsets must be non-negative integers, got ", v["data_offsets"].dump());
  e.begin = v["data_offsets"][0].get<uint64_t>();
  e.end = v["data_offsets"][1].get<uint64_t>();
  VDT_CHECK(e.begin <= e.end, where, ": data_offsets [", e.begin, ", ", e.end, "] has begin > end");
  VDT_CHECK(e.end <= buffer_size, where, ": data_offsets [", e.begin, ", ", e.end,
            "] run past the end of the data buffer (", buffer_size, " bytes); the file is truncated or corrupt");
  uint64_t bits = 0;
  VDT_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(info->bits), &bits), where, ": shape ",
            v["shape"].dump(), " of ", e.dtype, " holds more bytes than 64 bits count; the header is corrupt");
  VDT_CHECK(bits % 8 == 0 && e.end - e.begin == bits / 8, where, ": ", e.end - e.begin, " bytes do not match dtype ",
            e.dtype, " x shape ", shape_str(e.shape), " (expected ", bits / 8, " bytes)");
  return e;
}

}  // namespace

at::ScalarType scalar_type_of(const std::string& st_dtype, const std::string& where) {
  const DtypeInfo* info = find_dtype(st_dtype);
  VDT_CHECK(info, where, ": unknown safetensors dtype '", st_dtype, "'");
  VDT_CHECK(info->torch.has_value(), where, ": dtype ", st_dtype, " has no LibTorch equivalent and cannot be loaded");
  return *info->torch;
}

std::string st_dtype_of(at::ScalarType t) {
  for (const auto& d : dtype_table())
    if (d.torch && *d.torch == t) return d.name;
  VDT_FAIL("dtype ", c10::toString(t), " cannot be stored in safetensors");
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VDT_CHECK_SYS(fd, path, ": cannot open safetensors file");
  struct stat st {};
  if (fstat(fd, &st) < 0) {
    ::close(fd);
    VDT_CHECK_SYS(-1, path, ": cannot stat");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto mapping = std::make_shared<Mapping>();
  if (size > 0) {
    void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    VDT_CHECK(addr != MAP_FAILED, path, ": mmap of ", size, " bytes failed (", std::strerror(errno), ")");
    mapping->addr = addr;
    mapping->size = size;
  } else {
    ::close(fd);
  }
  const auto* bytes = static_cast<const uint8_t*>(mapping->addr);
  VDT_CHECK(size >= 8, path, ": file is ", size, " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);  // little-endian on every platform we build for
  VDT_CHECK(n <= kMaxHeader, path, ": header length ", n, " exceeds the 100 MB limit; not a safetensors file?");
  VDT_CHECK(8 + n <= size, path, ": header length ", n, " runs past the end of the file (", size,
            " bytes); the file is truncated");

  // Parse with a callback that rejects duplicate top-level keys (plain json::parse would keep the last one).
  std::set<std::string> seen;
  std::string duplicate;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth == 1 && ev == nlohmann::json::parse_event_t::key) {
      const auto k = parsed.get<std::string>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + 8 + n), cb);
  } catch (const nlohmann::json::exception& e) {
    VDT_FAIL(path, ": header is not valid JSON (", e.what(), ")");
  }
  VDT_CHECK(duplicate.empty(), path, ": tensor '", duplicate, "' appears twice in the header");
  VDT_CHECK(header.is_object(), path, ": header must be a JSON object");

  f->data_ = bytes + 8 + n;
  f->data_size_ = size - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      VDT_CHECK(it.value().is_object(), path, ": '__metadata__' must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        VDT_CHECK(m.value().is_string(), path, ": '__metadata__' key '", m.key(), "' is not a string");
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    f->entries_[it.key()] = parse_entry(path, it.key(), it.value(), f->data_size_);
  }
  // No overlaps and no holes: sorted by begin, every tensor starts where the previous one ended.
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [k, e] : f->entries_) order.emplace_back(e.begin, k);
  std::sort(order.begin(), order.end());
  uint64_t cursor = 0;
  for (const auto& [begin, k] : order) {
    const auto& e = f->entries_[k];
    if (e.begin == e.end) continue;  // empty tensors may sit anywhere
    VDT_CHECK(e.begin >= cursor, path, ": tensor '", k, "' [", e.begin, ", ", e.end,
              ") overlaps the previous tensor (which ends at ", cursor, ")");
    VDT_CHECK(e.begin == cursor, path, ": tensor '", k, "' starts at ", e.begin, " leaving a hole after byte ", cursor);
    cursor = e.end;
  }
  VDT_CHECK(cursor == f->data_size_, path, ": data buffer has ", f->data_size_ - cursor,
            " trailing bytes not covered by any tensor");
  f->mapping_ = mapping;
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

std::vector<std::string> SafetensorsFile::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, e] : entries_) out.push_back(k);
  return out;
}

const TensorEntry& SafetensorsFile::entry(const std::string& key) const {
  auto it = entries_.find(key);
  VDT_CHECK(it != entries_.end(), path_, ": no tensor named '", key, "'");
  return it->second;
}

torch::Tensor SafetensorsFile::get(const std::string& key) const {
  const TensorEntry& e = entry(key);
  const auto dtype = scalar_type_of(e.dtype, path_ + ": tensor '" + key + "'");
  const auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
  void* ptr = const_cast<uint8_t*>(data_ + e.begin);
  const size_t elem = c10::elementSize(dtype);
  if (e.end == e.begin) return torch::empty(e.shape, opts);
  if (reinterpret_cast<uintptr_t>(ptr) % elem != 0) {
    auto out = torch::empty(e.shape, opts);
    std::memcpy(out.data_ptr(), ptr, e.end - e.begin);
    return out;
  }
  auto keep = mapping_;
  return torch::from_blob(
      ptr, e.shape, [keep](void*) {}, opts);
}

SafetensorsSet SafetensorsSet::open(const std::vector<std::string>& paths) {
  VDT_CHECK(!paths.empty(), "no safetensors files given");
  SafetensorsSet set;
  for (const auto& p : paths) {
    set.files_.push_back(SafetensorsFile::open(p));
    const size_t idx = set.files_.size() - 1;
    for (const auto& k : set.files_.back()->keys()) {
      auto [it, fresh] = set.owner_.emplace(k, idx);
      VDT_CHECK(fresh, "tensor '", k, "' is in both ", set.files_[it->second]->path(), " and ", p,
                "\n---> HINT: pass each shard once, and no two checkpoints at the same time");
    }
  }
  return set;
}

std::vector<std::string> SafetensorsSet::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, i] : owner_) out.push_back(k);
  return out;
}

const TensorEntry& SafetensorsSet::entry(const std::string& key) const { return files_[owner_.at(key)]->entry(key); }

torch::Tensor SafetensorsSet::get(const std::string& key) const {
  auto it = owner_.find(key);
  VDT_CHECK(it != owner_.end(), "no tensor named '", key, "' in ", files_.size(), " file(s) starting with ",
            files_.front()->path());
  return files_[it->second]->get(key);
}

const std::string& SafetensorsSet::file_of(const std::string& key) const { return files_[owner_.at(key)]->path(); }

const Metadata& SafetensorsSet::metadata() const {
  for (const auto& f : files_)
    if (!f->metadata().empty()) return f->metadata();
  return empty_;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const Metadata& metadata) {
  // Reference layout: larger element alignment first, then by name, so every tensor is naturally aligned.
  std::vector<std::pair<std::string, torch::Tensor>> order;
  std::set<std::string> names;
  for (const auto& [k, t] : tensors) {
    VDT_CHECK(t.defined(), path, ": tensor '", k, "' is undefined");
    VDT_CHECK(k != "__metadata__", path, ": '__metadata__' is reserved and cannot name a tensor");
    VDT_CHECK(names.insert(k).second, path, ": tensor '", k, "' given twice");
    order.emplace_back(k, t.detach().to(torch::kCPU).contiguous());
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const auto ea = a.second.element_size(), eb = b.second.element_size();
    return ea != eb ? ea > eb : a.first < b.first;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto& [k, t] : order) {
    const uint64_t n = t.numel() * t.element_size();
    header[k] = {
        {"dtype", st_dtype_of(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t hn = h.size();

  AtomicFile f(path);
  f.write(&hn, 8);
  f.write(h.data(), h.size());
  fault_point("safetensors: header written");
  for (const auto& [k, t] : order) f.write(t.data_ptr(), t.numel() * t.element_size());
  f.commit("safetensors: data written, not yet renamed");
}

namespace {

// The whole of `v` parsed by `parse` (std::stoll / std::stod), or nothing when it is empty, has trailing text or does
// not fit the type (the parsers throw std::out_of_range on overflow). The error names the file, the key and `expected`.
template <typename T, typename Parse>
T parse_metadata(const std::string& v, const std::string& key, const std::string& file, const char* expected,
                 Parse parse) {
  size_t used = 0;
  T out{};
  try {
    out = parse(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  VDT_CHECK(used > 0 && used == v.size(), file, ": metadata '", key, "' is \"", v.substr(0, 40),
            v.size() > 40 ? "..." : "", "\", expected ", expected);
  return out;
}

}  // namespace

int64_t metadata_int(const Metadata& m, const std::string& key, const std::string& file, int64_t dflt) {
  const auto it = m.find(key);
  if (it == m.end()) return dflt;
  return parse_metadata<int64_t>(it->second, key, file, "a whole number that fits 64 bits",
                                 [](const std::string& v, size_t* used) { return std::stoll(v, used); });
}

double metadata_double(const Metadata& m, const std::string& key, const std::string& file, double dflt) {
  const auto it = m.find(key);
  if (it == m.end()) return dflt;
  // stod accepts "inf" and "nan" spelled out; those are not numbers a config can use.
  return parse_metadata<double>(it->second, key, file, "a finite number", [](const std::string& v, size_t* used) {
    const double d = std::stod(v, used);
    if (!std::isfinite(d)) *used = 0;
    return d;
  });
}

}  // namespace vdt
