// `vdt train` holds SIGTERM / SIGINT from the process's first instruction of its own (docs/resume.md): an entry in
// the executable's .preinit_array runs before any shared library's static initialisers (LibTorch's take most of a
// start-up's first ~0.15 s), so a scheduler's early SIGTERM stops the run cleanly (exit 0) instead of killing it with
// 143. Not here: what the trainer does with the request (core/stop_signal.h).
#include <cstring>

#include "core/stop_signal.h"

namespace {

void hold_stop_signals(int argc, char** argv, char** /*envp*/) {
  if (argc > 1 && std::strcmp(argv[1], "train") == 0) vdt::StopOnSignal::hold_for_process();
}

}  // namespace

// glibc calls each .preinit_array entry of the executable with (argc, argv, envp) before DT_INIT of its libraries.
__attribute__((section(".preinit_array"), used)) static void (*const kHoldStopSignals)(int, char**,
                                                                                       char**) = hold_stop_signals;
