// The SFT trainer's train state (docs/design.md §4 state and resume): its part of a checkpoint
// (train/checkpoint/checkpointer.h, trainer_state.json: step, data position, geometry, vocab, res, init_ckpt, model,
// precision, model_config) and where a resumed run picks up its data. The random streams are counter-based
// (core/rng.h): the data position and the micro-batch counter are all of their state. Not here: the slot files (the
// checkpointer), the loop (sft_trainer).
#pragma once
#include <torch/types.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "distributed/communicator.h"
#include "train/checkpoint/checkpointer.h"

namespace vdt {

// What must be unchanged for a resume to continue inside an epoch (the Python trainer's trainer_state geometry).
struct Geometry {
  int64_t num_processes = 1, grad_accum = 1, batch_size = 1, n_micro = 0, n_train = 0;
  uint64_t seed = 0;
  nlohmann::ordered_json to_json() const;
  bool operator==(const Geometry&) const = default;
};

// Data position after the last complete optimizer step.
struct DataPosition {
  int64_t epoch = 0, epoch_micro = 0;  // epoch_micro: micro batches of `epoch` consumed (skipped ones included)
  uint64_t micro_counter = 0;          // micro batches trained so far: the key of the timestep and noise draws
};

struct TrainerState {
  int64_t step = 0;
  DataPosition pos;
  bool has_epoch = true;  // false for a state without the epoch field: the epoch is inferred from the step
  Geometry geometry;
  std::string vocab, res, init_ckpt, model, precision;
  std::string model_config;  // the architecture (Denoiser::config_json); empty in states written before it was kept
  nlohmann::ordered_json to_json() const;
  // Throws naming `where` and the field when a required field is missing or of the wrong type.
  static TrainerState from_json(const nlohmann::json& j, const std::string& where);
};

// The SFT trainer's parts of a checkpoint (train/checkpoint/checkpointer.h): its TrainerState as trainer_state.json
// beside the update path's weights and optimizer state and the run's flags. Every rank calls it.
std::string save_trainer_state(const std::string& run_dir, const std::string& keep_slot, const TrainerState& st,
                               const SyncState& update, Communicator& comm, const std::string& config_json = {});

// A loaded SFT slot: the checkpoint plus its TrainerState.
struct LoadedState : LoadedCheckpoint {
  TrainerState st;
};

// The state behind --resume PATH (a run directory, a slot, or the `state` link). Prints a note for every unusable
// slot it skipped. Without any complete slot: nullopt when allow_none (--resume auto on a fresh run directory), else
// an error listing why each slot is unusable. With allow_none, sealed slots that are all corrupt are a
// CorruptStateError (checkpointer.h) unless allow_corrupt (--ignore_corrupt_state).
std::optional<LoadedState> load_trainer_state(const std::string& path, bool allow_none, bool allow_corrupt = false);

// Where a resumed run starts reading: the Python trainer's resume_position. Unchanged geometry -> the next micro batch
// of the saved epoch (or the next epoch when it was used up); changed geometry -> the start of the next epoch; a state
// without an epoch -> inferred from the step with the current geometry.
// Beyond the Python trainer: when only the world size changed, the exact global sample stream continues (when the
// consumed positions split evenly over the new ranks).
struct ResumePoint {
  int64_t epoch = 0, skip = 0;
  std::string how;
  uint64_t micro_counter = 0;  // this rank's micro-batch counter (global count / world)
};
ResumePoint resume_position(const TrainerState& saved, const Geometry& now);

}  // namespace vdt
