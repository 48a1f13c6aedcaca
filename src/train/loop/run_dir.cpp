// The run directory's lock and leftovers. The lock file holds "pid <pid> host <host> cmd <argv>" of its holder, so the
// second run can say who holds it; the lock itself is the flock, not the file's existence (a kill -9 leaves the file,
// never the lock).
#include "train/loop/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "core/state_slots.h"

namespace fs = std::filesystem;

namespace vdt {
namespace {

std::string own_command() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), out;
  for (char c : s) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.size() > 300 ? out.substr(0, 300) + " ..." : out;
}

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(n) / (1 << 30));
  else if (n >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

RunDirLock::RunDirLock(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  VDT_CHECK(!ec, flag, " ", dir, ": cannot create the run directory (", ec.message(), ")");
  const std::string path = (fs::path(dir) / kFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  VDT_CHECK_SYS(fd_, path, ": cannot open the run directory's lock file");
  if (::flock(fd_, LOCK_EX | LOCK_NB) < 0) {
    const int e = errno;
    std::ifstream f(path);
    std::string holder;
    std::getline(f, holder);
    ::close(fd_);
    fd_ = -1;
    errno = e;
    VDT_CHECK_SYS(e == EWOULDBLOCK ? 0 : -1, path, ": cannot lock the run directory");
    VDT_FAIL(flag, " ", dir, " is in use by another vdt process (",
             holder.empty() ? std::string("it has not written its pid yet") : holder,
             "); two runs writing one directory would overwrite each other's state and exports.\n"
             "---> HINT: wait for it or stop it, or give this run another ",
             flag);
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string who = "pid " + std::to_string(::getpid()) + " on host " + host + ": " + own_command() + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const auto n = ::pwrite(fd_, who.data(), who.size(), 0);
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

std::vector<Leftover> remove_leftovers(const std::string& dir) {
  static const std::regex ours(
      "(step-[0-9]+\\.safetensors|lora_step[0-9]+\\.safetensors|(train|val)_log\\.(csv|jsonl)|"
      "(train|val)_log\\.old[0-9]+\\.(csv|jsonl)|config(_resume[0-9]+)?\\.json|done\\.json|args\\.json|"
      "val_samples\\.json)\\.tmp\\.[0-9]+");
  static const std::regex any_tmp(".+\\.tmp\\.[0-9]+");
  std::vector<Leftover> removed;
  std::error_code ec;
  auto take = [&](const fs::path& p) {
    std::error_code e2;
    const uint64_t bytes = fs::is_regular_file(fs::symlink_status(p, e2)) ? fs::file_size(p, e2) : 0;
    if (fs::remove(p, e2)) removed.push_back({p.string(), bytes});
  };
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "state.tmp" && fs::is_symlink(e.symlink_status()))
      take(e.path());
    else if (std::regex_match(name, ours) && e.is_regular_file(ec))
      take(e.path());
  }
  for (const char* slot : {"state_A", "state_B"})
    for (const auto& e : fs::directory_iterator(fs::path(dir) / slot, ec))
      if (std::regex_match(e.path().filename().string(), any_tmp) && e.is_regular_file(ec)) take(e.path());
  return removed;
}

std::string describe_leftovers(const std::vector<Leftover>& removed) {
  if (removed.empty()) return "";
  uint64_t total = 0;
  std::string names;
  for (const auto& l : removed) {
    total += l.bytes;
    names += "\n  " + l.path + " (" + human_bytes(l.bytes) + ")";
  }
  return "[start] removed " + std::to_string(removed.size()) + " temp file" + (removed.size() > 1 ? "s" : "") +
         " left by an interrupted save (" + human_bytes(total) + "):" + names;
}

std::unique_ptr<RunDirLock> hold_run_dir(const std::string& dir, const std::string& flag) {
  auto lock = std::make_unique<RunDirLock>(dir, flag);
  check_state_link(dir);
  const std::string line = describe_leftovers(remove_leftovers(dir));
  if (!line.empty()) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  return lock;
}

}  // namespace vdt
