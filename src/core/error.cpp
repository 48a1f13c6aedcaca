// Out-of-line error construction so the macros stay small at every call site.
#include "core/error.h"

#include <cerrno>
#include <cstring>

namespace vdt::detail {

void throw_error(const std::string& msg) { throw Error(msg); }

void throw_sys_error(const char* call, const std::string& msg) {
  const int err = errno;
  throw Error(msg + " (" + call + " failed: " + std::strerror(err) + ")");
}

}  // namespace vdt::detail
