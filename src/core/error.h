// Errors and check macros. Every failure a user can cause is a vdt::Error whose message names the file, key or
// flag at fault, what was found and what was expected, plus a "---> HINT:" line when a fix is known (llm.c style).
// C calls (files, mmap) go through VDT_CHECK_SYS, which appends errno's text. No error codes, no silent fallbacks.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace vdt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const std::string& msg);
[[noreturn]] void throw_sys_error(const char* call, const std::string& msg);
}  // namespace detail

}  // namespace vdt

// Throws vdt::Error built from the streamed arguments when cond is false.
#define VDT_CHECK(cond, ...)                                                     \
  do {                                                                           \
    if (!(cond)) ::vdt::detail::throw_error(::vdt::detail::concat(__VA_ARGS__)); \
  } while (0)

#define VDT_FAIL(...) ::vdt::detail::throw_error(::vdt::detail::concat(__VA_ARGS__))

// For C calls that return -1 (or a negative value) and set errno: reports the call, errno's text and the message.
#define VDT_CHECK_SYS(expr, ...)                                                               \
  do {                                                                                         \
    if ((expr) < 0) ::vdt::detail::throw_sys_error(#expr, ::vdt::detail::concat(__VA_ARGS__)); \
  } while (0)
