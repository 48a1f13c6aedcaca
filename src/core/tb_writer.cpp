// TensorBoard event files without protobuf: each record is u64le length | u32le masked_crc32c(length) | Event bytes |
// u32le masked_crc32c(Event bytes) (tensorboard/summary/writer/record_writer.py). Field numbers from event.proto and
// summary.proto: Event wall_time=1 (double), step=2 (int64), file_version=3 (string), summary=5; Summary value=1;
// Summary.Value tag=1 (string), simple_value=2 (float), image=4, metadata=9; Summary.Image height=1, width=2,
// colorspace=3, encoded_image_string=4; SummaryMetadata plugin_data=1, PluginData plugin_name=1, content=2;
// Event session_log=7, SessionLog status=1 (enum, START = 1).
// HParams (tensorboard/plugins/hparams/plugin_data.proto, api.proto): HParamsPluginData version=1, experiment=2,
// session_start_info=3; Experiment time_created_secs=3, hparam_infos=4, metric_infos=5; HParamInfo name=1, type=4
// (DataType STRING 1, BOOL 2, FLOAT64 3); MetricInfo name=1; MetricName tag=2; SessionStartInfo hparams=1 (a map:
// repeated entry{key=1, value=2}), start_time_secs=5; google.protobuf.Value number_value=2, string_value=3,
// bool_value=4.
#include "core/tb_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/error.h"

namespace vdt {
namespace {

static_assert(std::endian::native == std::endian::little, "the event-file encoder writes host-order little-endian");

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// Protobuf wire format: tag = (field << 3) | wire type; 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, const std::string& s) {
  put_varint(out, (field << 3) | 2);
  put_varint(out, s.size());
  out += s;
}

void put_varint_field(std::string& out, uint32_t field, uint64_t v) {
  put_varint(out, field << 3);
  put_varint(out, v);
}
void put_double_field(std::string& out, uint32_t field, double v) {
  put_varint(out, (field << 3) | 1);
  put_fixed(out, v);
}

// Event{wall_time, step, summary}
std::string summary_event(double wall_time, int64_t step, const std::string& summary) {
  std::string ev;
  put_double_field(ev, 1, wall_time);
  put_varint_field(ev, 2, static_cast<uint64_t>(step));  // int64: negative values take 10 bytes (two's complement)
  put_bytes(ev, 5, summary);
  return ev;
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  VDT_CHECK_SYS(::gethostname(buf, sizeof buf - 1), "TbWriter: cannot read the host name for the event file name");
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TbWriter::TbWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VDT_CHECK(!ec && std::filesystem::is_directory(dir), dir, ": cannot create the TensorBoard log directory (",
            ec ? ec.message() : "a file is in the way", ")");
  const double t = wall_time_now();
  char stamp[16];
  std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(t));
  // <n> plays the role of event_file_writer.py's global uid: distinct writers of one process, opened in the same
  // second, get distinct files, zero-padded so that name order is opening order (TensorBoard reads a directory's
  // files in name order, which the purge marker of a later writer relies on). O_EXCL skips names already on disk (a
  // restarted process reusing a pid).
  static std::atomic<int> counter{0};
  const std::string base = dir + "/events.out.tfevents." + stamp + "." + hostname() + "." + std::to_string(::getpid());
  int fd = -1;
  for (;;) {
    char n[16];
    std::snprintf(n, sizeof n, "%06d", counter++);
    path_ = base + "." + n;
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
  }
  VDT_CHECK_SYS(fd, path_, ": cannot create the TensorBoard event file");
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    const int err = errno;
    ::close(fd);
    errno = err;
    VDT_CHECK_SYS(-1, path_, ": cannot open the TensorBoard event file for writing");
  }
  std::string ev;
  put_varint(ev, (1 << 3) | 1);
  put_fixed(ev, t);
  put_bytes(ev, 3, "brain.Event:2");
  write_record(ev);
}

TbWriter::~TbWriter() {
  if (!file_) return;
  // A destructor cannot throw; a failed final flush is reported, not swallowed.
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    std::cerr << "[vdt] warning: " << path_ << ": final flush failed: " << std::strerror(errno) << "\n";
  std::fclose(file_);
}

void TbWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string val;
  put_bytes(val, 1, tag);
  put_varint(val, (2 << 3) | 5);
  put_fixed(val, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, val);
  write_record(summary_event(wall_time_now(), step, summary));
}

void TbWriter::add_image(const std::string& tag, const Png& png, int64_t step) {
  VDT_CHECK(png.height > 0 && png.width > 0 && !png.bytes.empty(), path_, ": image '", tag, "' is empty");
  std::string image;
  put_varint_field(image, 1, static_cast<uint64_t>(png.height));
  put_varint_field(image, 2, static_cast<uint64_t>(png.width));
  put_varint_field(image, 3, 3);  // RGB
  put_bytes(image, 4, png.bytes);
  std::string val;
  put_bytes(val, 1, tag);
  put_bytes(val, 4, image);
  std::string summary;
  put_bytes(summary, 1, val);
  write_record(summary_event(wall_time_now(), step, summary));
}

void TbWriter::add_hparams(const nlohmann::ordered_json& hparams, const std::vector<std::string>& metric_tags) {
  VDT_CHECK(hparams.is_object(), path_, ": hyper-parameters must be a JSON object, got ", hparams.type_name());
  const double t = wall_time_now();
  // Summary.Value{tag, metadata{plugin_data{plugin_name "hparams", content HParamsPluginData{version 0, <field>}}}}
  auto plugin_value = [](const std::string& tag, uint32_t field, const std::string& message) {
    std::string data;  // version 0 is the default: not written, as protobuf omits it
    put_bytes(data, field, message);
    std::string plugin;
    put_bytes(plugin, 1, "hparams");
    put_bytes(plugin, 2, data);
    std::string metadata;
    put_bytes(metadata, 1, plugin);
    std::string val;
    put_bytes(val, 1, tag);
    put_bytes(val, 9, metadata);
    return val;
  };
  std::string experiment, start;
  put_double_field(experiment, 3, t);
  for (const auto& [name, v] : hparams.items()) {
    std::string value;  // google.protobuf.Value
    int type = 1;
    if (v.is_boolean()) {
      put_varint_field(value, 4, v.get<bool>() ? 1 : 0);
      type = 2;
    } else if (v.is_number()) {
      put_double_field(value, 2, v.get<double>());
      type = 3;
    } else {
      put_bytes(value, 3, v.is_string() ? v.get<std::string>() : v.dump());
    }
    std::string info;
    put_bytes(info, 1, name);
    put_varint_field(info, 4, static_cast<uint64_t>(type));
    put_bytes(experiment, 4, info);
    std::string entry;
    put_bytes(entry, 1, name);
    put_bytes(entry, 2, value);
    put_bytes(start, 1, entry);
  }
  for (const auto& tag : metric_tags) {
    std::string metric_name;
    put_bytes(metric_name, 2, tag);
    std::string info;
    put_bytes(info, 1, metric_name);
    put_bytes(experiment, 5, info);
  }
  put_double_field(start, 5, t);
  for (const auto& val :
       {plugin_value("_hparams_/experiment", 2, experiment), plugin_value("_hparams_/session_start_info", 3, start)}) {
    std::string summary;
    put_bytes(summary, 1, val);
    write_record(summary_event(t, 0, summary));
  }
}

void TbWriter::purge_from(int64_t step) {
  const double t = wall_time_now();
  std::string version;
  put_varint(version, (1 << 3) | 1);
  put_fixed(version, t);
  put_varint(version, (2 << 3) | 0);
  put_varint(version, static_cast<uint64_t>(step));
  put_bytes(version, 3, "brain.Event:2");
  write_record(version);
  std::string session_log;
  put_varint(session_log, (1 << 3) | 0);
  put_varint(session_log, 1);  // SessionLog.START
  std::string ev;
  put_varint(ev, (1 << 3) | 1);
  put_fixed(ev, t);
  put_varint(ev, (2 << 3) | 0);
  put_varint(ev, static_cast<uint64_t>(step));
  put_bytes(ev, 7, session_log);
  write_record(ev);
}

void TbWriter::write_record(const std::string& data) {
  std::string rec;
  rec.reserve(data.size() + 16);
  put_fixed(rec, static_cast<uint64_t>(data.size()));
  put_fixed(rec, masked_crc32c(rec.data(), 8));
  rec += data;
  put_fixed(rec, masked_crc32c(data.data(), data.size()));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    VDT_CHECK_SYS(-1, path_, ": write failed (disk full?)");
}

void TbWriter::flush() {
  VDT_CHECK_SYS(std::fflush(file_) == 0 ? 0 : -1, path_, ": flush failed (disk full?)");
  VDT_CHECK_SYS(::fsync(::fileno(file_)), path_, ": fsync failed (disk full?)");
}

}  // namespace vdt
