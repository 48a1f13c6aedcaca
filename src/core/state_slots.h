// Crash-safe training-state storage (docs/design.md §4 state, §8): two alternating slot directories <run>/state_A and
// <run>/state_B, and a link <run>/state to the newest complete one. A slot counts only when it is complete: its
// files are written and fsync'ed, then checksummed into slot.json (written atomically), then re-read and verified,
// and only then does the link move. A kill at any point leaves the other slot loadable; a write error (full disk)
// leaves the previous slot and the link untouched. Readers check every file's size and CRC-32 against slot.json,
// so a partial or corrupt slot is detected and the other one is used, with a note saying why.
// Not here: what goes into a slot (train/checkpoint/checkpointer.h).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace vdt {

// Writes one slot. Construction picks the slot to write (never `keep`, the slot this process resumed from or last
// committed; by default never the link's target), removes its slot.json first — from then on it is incomplete —
// and empties it. Files are written into dir(); commit() seals the slot and moves the link.
class SlotWriter {
 public:
  SlotWriter(const std::string& run_dir, const std::string& keep = "");
  ~SlotWriter();  // without commit(): removes what was written (frees the disk after a failed save)
  SlotWriter(const SlotWriter&) = delete;
  SlotWriter& operator=(const SlotWriter&) = delete;

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  // A small text file (JSON), written to a temp file, fsync'ed and renamed.
  void write_text(const std::string& file, const std::string& content);
  // Checksums every file of the slot into slot.json with `info` (which must hold "step"), verifies the slot by
  // re-reading it, then points <run>/state at it.
  void commit(const nlohmann::ordered_json& info);

 private:
  std::string run_dir_, name_, dir_;
  bool committed_ = false;
};

struct SlotInfo {
  std::string dir;              // the slot directory (state_A or state_B)
  nlohmann::ordered_json info;  // what commit() was given
};

// "" when the slot at `dir` is complete and every file matches slot.json; otherwise what is wrong, naming the file.
std::string check_slot(const std::string& dir);

// The slot to resume from. `path` is a run directory or the `state` link (either way the newest complete slot by the
// step its seal records, whatever the link says: a kill between sealing a slot and moving the link leaves the link
// one save behind), or a slot directory (that slot; when it is incomplete or corrupt, the other slot of the run, with
// a note). nullopt when no complete slot exists; `notes` then says, per slot, why.
std::optional<SlotInfo> find_slot(const std::string& path, std::vector<std::string>* notes);

// The slot directories under run_dir that were sealed (their slot.json exists), complete or not. A slot without a
// seal is one a save never finished (killed or out of disk); a sealed slot that fails check_slot is corrupt.
std::vector<std::string> sealed_slots(const std::string& run_dir);

// Points <run_dir>/state at `slot_dir` (a slot of run_dir) when it points elsewhere or is missing; returns the old
// target ("" when there was none) when it moved the link, nullopt when the link was already right. The caller holds
// the run directory (one writer at a time).
std::optional<std::string> repair_state_link(const std::string& run_dir, const std::string& slot_dir);

// Throws when <run_dir>/state exists and is not a symlink (a copied state, a file): vdt could neither move it nor
// tell which slot is newest through it. Called at start-up, before any training.
void check_state_link(const std::string& run_dir);

// The run directory a slot path belongs to (its parent when `path` names state_A, state_B or state).
std::string run_dir_of(const std::string& path);

}  // namespace vdt
