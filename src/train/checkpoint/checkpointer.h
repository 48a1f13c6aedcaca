// One checkpointer for both trainers (torchtitan's components/checkpoint: a state made of named parts), on the
// crash-safe state slots of core/state_slots.h (state_A/, state_B/, the `state` link to the newest complete one).
// A slot holds
//   weights-RRRRR-of-WWWWW.safetensors     the update path's weights (distributed/grad_sync.h SyncState): by
//                                          checkpoint name, or a ZeRO-2 rank's bucket slices with their layout
//   optimizer-RRRRR-of-WWWWW.safetensors   AdamW exp_avg.<name>, exp_avg_sq.<name>, step.<name> (or bucket slices)
//   trainer_state.json                     the trainer's train state and data position ("trainer" names which)
//   config.json                            the run's flags
// Every rank writes its shard (one shard when the state is replicated); rank 0 chooses the slot, writes the JSON and
// seals the slot once every shard is written, so a state written by W ranks loads with any world size.
// Not here: what a trainer's train state means (train_state.h for SFT, lora_checkpoint.h for causal).
#pragma once
#include <torch/types.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "distributed/communicator.h"
#include "distributed/grad_sync.h"

namespace vdt {

struct CheckpointParts {
  std::string trainer;  // "vdt train sft" | "vdt train causal"
  int64_t step = 0;
  nlohmann::ordered_json train_state;  // the train state and data position (written with "step" and "trainer")
  SyncState update;                    // weights and optimizer
  std::string config_json;             // the run's flags; empty: no config.json
  bool replicated = false;             // the update state is the same on every rank: rank 0 writes one shard
};

// Writes a new slot under run_dir (never over `keep_slot`, the slot last written or resumed from) and seals it; every
// rank calls it. Returns the slot directory. On failure (full disk, ...) throws with the file and errno, saying the
// previous state is intact, after removing what it wrote.
std::string save_checkpoint(const std::string& run_dir, const std::string& keep_slot, const CheckpointParts& parts,
                            Communicator& comm);

// A loaded slot. Its tensors are read through full(), whatever the layout that wrote them.
struct LoadedCheckpoint {
  std::string slot;
  nlohmann::json train_state;
  std::vector<std::shared_ptr<SafetensorsFile>> weight_files, optimizer_files;
  // The full tensor of `kind` ("weight", "exp_avg" or "exp_avg_sq") of parameter `name` (flattened for bucket
  // layouts); an error naming the slot when absent.
  torch::Tensor full(const std::string& kind, const std::string& name) const;
  int64_t optimizer_steps() const;  // AdamW's step count

 private:
  mutable std::map<std::string, torch::Tensor> bucket_cache_;
};

// Every sealed slot of a run is corrupt: starting from step 0 would silently throw the run away.
struct CorruptStateError : Error {
  using Error::Error;
};

// The newest complete slot behind `path` (a run directory, a slot, or the `state` link), for `trainer`. Prints a note
// for every unusable slot it skipped. Without any: nullopt when allow_none, else an error listing why each slot is
// unusable (`flag` names the option in it). With allow_none, slots that were sealed but are all corrupt are still a
// CorruptStateError listing them, unless allow_corrupt (`corrupt_flag` names the flag that sets it); slots a save
// never finished are not. A slot another trainer wrote is an error naming both.
std::optional<LoadedCheckpoint> load_checkpoint(const std::string& path, bool allow_none, const std::string& trainer,
                                                const std::string& flag = "--resume", bool allow_corrupt = false,
                                                const std::string& corrupt_flag = "");

}  // namespace vdt
