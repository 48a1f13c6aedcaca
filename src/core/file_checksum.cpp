#include "core/file_checksum.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>

#include "core/error.h"

namespace vdt {

std::string FileChecksum::crc_hex() const {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(crc32));
  return buf;
}

FileChecksum file_checksum(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VDT_CHECK_SYS(fd, path, ": cannot open to checksum");
  std::vector<unsigned char> buf(8 << 20);
  FileChecksum s;
  s.path = path;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      errno = err;
      VDT_CHECK_SYS(-1, path, ": read while checksumming");
    }
    if (n == 0) break;
    crc = ::crc32(crc, buf.data(), static_cast<uInt>(n));
    s.bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  s.crc32 = static_cast<uint32_t>(crc);
  return s;
}

std::vector<FileChecksum> file_checksums(const std::vector<std::string>& paths) {
  std::vector<FileChecksum> out;
  for (const auto& p : paths) out.push_back(file_checksum(p));
  return out;
}

}  // namespace vdt
