// A trainer's hold on its run directory (--output / --out), taken by rank 0 at start-up before anything is written:
// an advisory lock (flock(2) on <run>/.vdt.lock, released by the kernel when the process ends, kill -9 included) so two
// runs never write one directory, and the removal of temp files (`<name>.tmp.<pid>`, core/atomic_file.h) that an
// interrupted save of an earlier process left there. Not here: what the files are (checkpointer, exports, logs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vdt {

class RunDirLock {
 public:
  // Creates `dir` if needed and locks it; when another process holds it, throws naming that process (its pid, host and
  // command, as it wrote them into the lock file) and `flag`.
  RunDirLock(const std::string& dir, const std::string& flag);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  static constexpr const char* kFile = ".vdt.lock";

 private:
  int fd_ = -1;
};

struct Leftover {
  std::string path;
  uint64_t bytes = 0;
};

// Removes what interrupted saves left in `dir` (call it while holding the RunDirLock: no other writer is alive):
// temp files of vdt's own outputs — `<name>.tmp.<digits>` where <name> is a file vdt writes there (step-N and
// lora_stepN safetensors, the logs, config/args/done JSON) — anything `*.tmp.<digits>` inside state_A/ and
// state_B/, and a `state.tmp` link. Other files, however named, are left alone. Returns what it removed.
std::vector<Leftover> remove_leftovers(const std::string& dir);

// The start-up line for what remove_leftovers removed ("" when nothing).
std::string describe_leftovers(const std::vector<Leftover>& removed);

// A trainer's start-up on its run directory (rank 0): lock it, refuse a `state` that is not a link
// (core/state_slots.h), remove the leftovers of interrupted saves and say so.
std::unique_ptr<RunDirLock> hold_run_dir(const std::string& dir, const std::string& flag);

}  // namespace vdt
