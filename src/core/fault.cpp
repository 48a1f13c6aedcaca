#include "core/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace vdt {
namespace {

struct FaultEnv {
  long kill_at = 0;  // 0 = never
  bool trace = false;
  FaultEnv() {
    if (const char* s = std::getenv("VDT_FAULT_KILL_AT")) kill_at = std::strtol(s, nullptr, 10);
    if (const char* s = std::getenv("VDT_FAULT_TRACE")) trace = s[0] == '1';
  }
};

}  // namespace

void fault_point(const char* where) {
  static const FaultEnv env;
  static std::atomic<long> hits{0};
  if (env.kill_at <= 0 && !env.trace) return;
  const long n = ++hits;
  if (env.trace) std::fprintf(stderr, "[fault] point %ld: %s\n", n, where);
  if (n == env.kill_at) {
    std::fprintf(stderr, "[fault] VDT_FAULT_KILL_AT=%ld: killing the process at %s\n", n, where);
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  }
}

}  // namespace vdt
