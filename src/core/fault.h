// Fault injection for the crash-safety tests (docs/design.md §8): named points in the save paths where a test can have
// the process killed with SIGKILL, exactly as `kill -9` would. Inert unless the environment variable
// VDT_FAULT_KILL_AT=N is set (read once): then the N-th point reached (1-based, counted over the process) prints its
// name on stderr and kills the process. VDT_FAULT_TRACE=1 prints every point reached, so a test can count them. Not
// here: what is saved (state_slots.h, safetensors.h).
#pragma once

namespace vdt {

void fault_point(const char* where);

}  // namespace vdt
