// State slots. slot.json: {"format": "vdt-state-slot/1", "files": [{"name", "bytes", "crc32"}], "info": {...}}.
// The link is a relative symlink (state -> state_A) replaced atomically by rename(2) of a fresh link.
#include "core/state_slots.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/file_checksum.h"

namespace fs = std::filesystem;

namespace vdt {
namespace {

constexpr const char* kManifest = "slot.json";
constexpr const char* kFormat = "vdt-state-slot/1";
const char* const kSlots[] = {"state_A", "state_B"};

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string link_target(const std::string& run_dir) {
  std::error_code ec;
  const fs::path link = fs::path(run_dir) / "state";
  if (!fs::is_symlink(link, ec)) return "";
  return fs::read_symlink(link, ec).filename().string();
}

bool is_slot_name(const std::string& n) { return n == kSlots[0] || n == kSlots[1]; }

// Points run_dir/state at `slot`: a fresh link state.tmp renamed over it, so a reader sees the old link or the new
// one. `before_move` names the fault point between creating the link and moving it (none when null).
void swap_state_link(const std::string& run_dir, const std::string& slot, const char* before_move) {
  const std::string tmp_link = (fs::path(run_dir) / "state.tmp").string();
  ::unlink(tmp_link.c_str());
  VDT_CHECK_SYS(::symlink(slot.c_str(), tmp_link.c_str()), tmp_link, ": cannot create the state link");
  if (before_move) fault_point(before_move);
  VDT_CHECK_SYS(::rename(tmp_link.c_str(), (fs::path(run_dir) / "state").c_str()), "cannot move ", tmp_link, " to ",
                run_dir, "/state");
  fsync_dir(run_dir);
}

}  // namespace

std::string run_dir_of(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.has_filename() == false) p = p.parent_path();
  const std::string name = p.filename().string();
  if (is_slot_name(name) || name == "state") {
    const auto parent = p.parent_path();
    return parent.empty() ? "." : parent.string();
  }
  return p.string();
}

void check_state_link(const std::string& run_dir) {
  std::error_code ec;
  const fs::path link = fs::path(run_dir) / "state";
  const bool is_link = fs::is_symlink(link, ec);
  VDT_CHECK(is_link || !fs::exists(link, ec), link.string(), " exists and is not a link (",
            fs::is_directory(link, ec) ? "a directory" : "a regular file",
            "); vdt keeps its state in state_A/ and "
            "state_B/ and points `state` at the newest.\n",
            "---> HINT: move it away (it may be a copied state; pass it to --resume directly)");
}

std::vector<std::string> sealed_slots(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const char* s : kSlots)
    if (fs::exists(fs::path(run_dir) / s / kManifest, ec)) out.push_back((fs::path(run_dir) / s).string());
  return out;
}

std::optional<std::string> repair_state_link(const std::string& run_dir, const std::string& slot_dir) {
  check_state_link(run_dir);
  const std::string name = fs::path(slot_dir).lexically_normal().filename().string();
  VDT_CHECK(is_slot_name(name), slot_dir, ": not a state slot (state_A or state_B)");
  const std::string old = link_target(run_dir);
  if (old == name) return std::nullopt;
  swap_state_link(run_dir, name, nullptr);
  return old;
}

SlotWriter::SlotWriter(const std::string& run_dir, const std::string& keep) : run_dir_(run_dir) {
  std::error_code ec;
  check_state_link(run_dir);
  const std::string avoid = keep.empty() ? link_target(run_dir) : fs::path(keep).filename().string();
  name_ = avoid == kSlots[0] ? kSlots[1] : kSlots[0];
  dir_ = (fs::path(run_dir) / name_).string();
  fs::create_directories(dir_, ec);
  VDT_CHECK(!ec, dir_, ": cannot create the state slot (", ec.message(), ")");
  // The manifest goes first: from here on this slot is incomplete until commit().
  if (::unlink((fs::path(dir_) / kManifest).c_str()) < 0 && errno != ENOENT)
    VDT_CHECK_SYS(-1, dir_, "/", kManifest, ": cannot remove the old manifest");
  fsync_dir(dir_);
  fault_point("slot: old manifest removed");
  for (const auto& e : fs::directory_iterator(dir_, ec)) fs::remove_all(e.path(), ec);
}

SlotWriter::~SlotWriter() {
  if (committed_) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) fs::remove_all(e.path(), ec);
}

void SlotWriter::write_text(const std::string& file, const std::string& content) {
  write_file_atomic(path(file), content);
  fault_point("slot: text file written");
}

void SlotWriter::commit(const nlohmann::ordered_json& info) {
  VDT_CHECK(info.contains("step"), "state slot info needs a step");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.is_regular_file() && e.path().filename() != kManifest) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  VDT_CHECK(!names.empty(), dir_, ": nothing was written into the state slot");
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& n : names) {
    const FileChecksum s = file_checksum(path(n));
    files.push_back({{"name", n}, {"bytes", s.bytes}, {"crc32", s.crc32}});
  }
  fsync_dir(dir_);
  fault_point("slot: files checksummed");
  nlohmann::ordered_json m = {{"format", kFormat}, {"files", files}, {"info", info}};
  write_file_atomic(path(kManifest), m.dump(2) + "\n");
  fsync_dir(dir_);
  fault_point("slot: manifest written");
  const std::string bad = check_slot(dir_);
  VDT_CHECK(bad.empty(), dir_, ": the state slot failed verification right after writing: ", bad,
            "\n---> HINT: the disk or filesystem is corrupting data; the previous state is intact");
  swap_state_link(run_dir_, name_, "slot: verified, link not yet moved");
  committed_ = true;
  fault_point("slot: link moved");
}

std::string check_slot(const std::string& dir) {
  const fs::path manifest = fs::path(dir) / kManifest;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "no such directory";
  if (!fs::exists(manifest, ec)) return std::string(kManifest) + " missing (the slot was never completed)";
  nlohmann::json m;
  try {
    std::ifstream f(manifest);
    m = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    return std::string(kManifest) + " unreadable (" + e.what() + ")";
  }
  if (m.value("format", "") != kFormat) return std::string(kManifest) + ": format is not " + kFormat;
  if (!m.contains("files") || !m["files"].is_array() || !m.contains("info") || !m["info"].contains("step"))
    return std::string(kManifest) + ": missing files or info.step";
  for (const auto& f : m["files"]) {
    const std::string name = f.value("name", "");
    const fs::path p = fs::path(dir) / name;
    if (name.empty() || !fs::is_regular_file(p, ec)) return name + " missing";
    const uint64_t bytes = f.value("bytes", uint64_t{0});
    if (fs::file_size(p, ec) != bytes)
      return name + ": " + std::to_string(fs::file_size(p, ec)) + " bytes, slot.json says " + std::to_string(bytes) +
             " (truncated?)";
    FileChecksum s;
    try {
      s = file_checksum(p.string());
    } catch (const std::exception& e) {
      return e.what();
    }
    if (s.crc32 != f.value("crc32", uint32_t{0}))
      return name + ": CRC-32 " + std::to_string(s.crc32) + " does not match slot.json's " +
             std::to_string(f.value("crc32", uint32_t{0})) + " (corrupt)";
  }
  return "";
}

std::optional<SlotInfo> find_slot(const std::string& path, std::vector<std::string>* notes) {
  std::error_code ec;
  const std::string run = run_dir_of(path);
  const std::string named = fs::path(path).lexically_normal().filename().string();
  // A named slot is tried first; the `state` link is not trusted over the seals (a kill between sealing a slot and
  // moving the link leaves it one save behind), so it means the run's newest, as the run directory does.
  std::string preferred;
  if (is_slot_name(named)) preferred = named;
  // Candidates in the order to try: the named slot first, then by the step their manifests claim, newest first.
  // Only a candidate that is tried gets its files checksummed (a 5B state is tens of GB).
  std::vector<std::pair<int64_t, std::string>> order;
  for (const char* s : kSlots) {
    const fs::path dir = fs::path(run) / s;
    if (!fs::is_directory(dir, ec)) continue;
    int64_t step = -1;
    try {
      std::ifstream f(dir / kManifest);
      if (f.good()) step = nlohmann::json::parse(f).at("info").at("step").get<int64_t>();
    } catch (const std::exception&) {
    }
    order.emplace_back(s == preferred ? INT64_MAX : step, dir.string());
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [rank, dir] : order) {
    const std::string bad = check_slot(dir);
    if (!bad.empty()) {
      if (notes) notes->push_back(dir + " is unusable: " + bad);
      continue;
    }
    std::ifstream f(fs::path(dir) / kManifest);
    const auto m = nlohmann::ordered_json::parse(f);
    if (notes && notes->size() > 0) notes->push_back("using " + dir + " (step " + m["info"]["step"].dump() + ")");
    return SlotInfo{dir, m["info"]};
  }
  return std::nullopt;
}

}  // namespace vdt
