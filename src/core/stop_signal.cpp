#include "core/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace vdt {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_depth{0};  // StopOnSignal objects alive (in-process ranks each hold one)
struct sigaction g_old_term, g_old_int;

void on_signal(int sig) {
  if (g_signal.exchange(sig) != 0) {  // the second signal: the default action, now
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  static const char msg[] =
      "\n[stop] signal received: finishing the current step, then saving state and exiting "
      "(send it again to stop at once)\n";
  [[maybe_unused]] const auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
}

}  // namespace

StopOnSignal::StopOnSignal() {
  if (g_depth++ > 0) return;  // nested: the handlers are in place and a pending request stands
  g_signal.store(0);          // a new run starts without a pending request
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, &g_old_term);
  ::sigaction(SIGINT, &sa, &g_old_int);
}

void StopOnSignal::hold_for_process() {
  if (g_depth++ > 0) return;
  g_signal.store(0);
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, &g_old_term);
  ::sigaction(SIGINT, &sa, &g_old_int);
}

StopOnSignal::~StopOnSignal() {
  if (--g_depth > 0) return;
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGINT, &g_old_int, nullptr);
}

bool StopOnSignal::requested() { return g_signal.load() != 0; }
int StopOnSignal::signal_number() { return g_signal.load(); }
const char* StopOnSignal::signal_name() {
  switch (g_signal.load()) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "none";
  }
}
void StopOnSignal::reset() { g_signal.store(0); }

}  // namespace vdt
