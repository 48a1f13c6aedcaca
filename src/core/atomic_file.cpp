#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "core/error.h"
#include "core/fault.h"

namespace vdt {

AtomicFile::AtomicFile(std::string path, mode_t mode)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  VDT_CHECK_SYS(fd_, tmp_, ": cannot create temp file for ", path_,
                "\n---> HINT: does the directory exist and is it writable?");
  if (::fchmod(fd_, mode) < 0) {  // the umask must not narrow what readers (other users, the Python side) see
    const int e = errno;
    ::close(fd_);
    ::unlink(tmp_.c_str());
    errno = e;
    VDT_CHECK_SYS(-1, tmp_, ": chmod");
  }
}

AtomicFile::~AtomicFile() {
  if (done_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));  // write() stops short of 2 GiB
    if (k < 0 && errno == EINTR) continue;
    VDT_CHECK_SYS(k < 0 ? -1 : 0, tmp_, ": write failed (disk full?)");
    p += k, n -= static_cast<size_t>(k);
  }
}

void AtomicFile::commit(const char* fault) {
  VDT_CHECK_SYS(::fsync(fd_), tmp_, ": fsync failed (disk full?)");
  const int fd = fd_;
  fd_ = -1;
  VDT_CHECK_SYS(::close(fd), tmp_, ": close failed (disk full?)");
  if (fault) fault_point(fault);
  VDT_CHECK_SYS(::rename(tmp_.c_str(), path_.c_str()), "cannot rename ", tmp_, " to ", path_);
  done_ = true;
  const auto dir = std::filesystem::path(path_).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

}  // namespace vdt
