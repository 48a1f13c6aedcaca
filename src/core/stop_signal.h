// Graceful stop on SIGTERM / SIGINT (SPEC §8): while a StopOnSignal is alive, the first SIGTERM or SIGINT only sets
// a flag the training loop polls between steps (it then saves its state and exits 0, so a scheduler re-queues the
// job); a second one restores the default action and re-raises it, for a user who really wants out now.
// Not here: what the loop does when asked to stop.
#pragma once

namespace vdt {

class StopOnSignal {
 public:
  StopOnSignal();   // clears any earlier request and installs the handlers (the destructor restores the old ones)
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  static bool requested();
  static int signal_number();  // 0 when none arrived
  static const char* signal_name();
  static void reset();         // forget a request (tests)
};

}  // namespace vdt
