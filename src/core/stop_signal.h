// Graceful stop on SIGTERM / SIGINT (docs/design.md §8): while a StopOnSignal is alive, the first SIGTERM or SIGINT
// only sets a flag the training loop polls between steps (it then saves its state and exits 0, so a scheduler re-queues
// the job); a second one restores the default action and re-raises it, for a user who really wants out now. Not here:
// what the loop does when asked to stop.
#pragma once

namespace vdt {

class StopOnSignal {
 public:
  // Installs the handlers (the destructor restores the old ones). The outermost one clears any earlier request; a
  // nested one keeps it, so a signal that arrived while `main` was starting up (it holds one around a trainer's
  // start-up) still stops the trainer, which then exits 0 before its first step.
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  // Installs the handlers for the rest of the process, as the outermost holder (never removed), keeping a request
  // that arrives from now on for every StopOnSignal made later. `vdt train` calls it before any library's static
  // initialisers run (cli/early_stop.cpp), so a signal while LibTorch loads stops the run cleanly too. Only touches
  // atomics and sigaction: safe before the C++ runtime is initialised.
  static void hold_for_process();

  static bool requested();
  static int signal_number();  // 0 when none arrived
  static const char* signal_name();
  static void reset();  // forget a request (tests)
};

}  // namespace vdt
