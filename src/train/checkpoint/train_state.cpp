#include "train/checkpoint/train_state.h"

#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/state_slots.h"

namespace fs = std::filesystem;

namespace vdt {
namespace {

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  VDT_CHECK(j.contains(key), where, ": field '", key, "' is missing");
  try {
    return j.at(key).get<T>();
  } catch (const std::exception& e) {
    VDT_FAIL(where, ": field '", key, "' has the wrong type (", j.at(key).dump(), ")");
  }
}

}  // namespace

nlohmann::ordered_json Geometry::to_json() const {
  return {{"num_processes", num_processes},
          {"grad_accum", grad_accum},
          {"batch_size", batch_size},
          {"n_micro", n_micro},
          {"n_train", n_train},
          {"seed", seed}};
}

nlohmann::ordered_json TrainerState::to_json() const {
  nlohmann::ordered_json j = {{"step", step},
                              {"arm", "gc25d"},
                              {"vocab", vocab},
                              {"res", res},
                              {"init_ckpt", init_ckpt},
                              {"model", model},
                              {"precision", precision},
                              {"epoch", pos.epoch},
                              {"epoch_micro", pos.epoch_micro},
                              {"micro_counter", pos.micro_counter},
                              {"trainer", "vdt train sft"}};
  if (!model_config.empty()) j["model_config"] = model_config;
  const auto geo = geometry.to_json();
  for (const auto& [k, v] : geo.items()) j[k] = v;  // flat, as the Python trainer writes it
  return j;
}

TrainerState TrainerState::from_json(const nlohmann::json& j, const std::string& where) {
  TrainerState s;
  s.step = field<int64_t>(j, "step", where);
  s.vocab = j.value("vocab", "");
  s.res = j.value("res", "");
  s.init_ckpt = j.value("init_ckpt", "");
  s.model = j.value("model", "");
  s.precision = j.value("precision", "");
  s.model_config = j.value("model_config", "");
  s.has_epoch = j.contains("epoch");
  if (s.has_epoch) {
    s.pos.epoch = field<int64_t>(j, "epoch", where);
    s.pos.epoch_micro = j.value("epoch_micro", int64_t{0});
  }
  s.pos.micro_counter = j.value("micro_counter", uint64_t{0});
  s.geometry.num_processes = j.value("num_processes", int64_t{1});
  s.geometry.grad_accum = field<int64_t>(j, "grad_accum", where);
  s.geometry.batch_size = field<int64_t>(j, "batch_size", where);
  s.geometry.n_micro = field<int64_t>(j, "n_micro", where);
  s.geometry.n_train = field<int64_t>(j, "n_train", where);
  s.geometry.seed = field<uint64_t>(j, "seed", where);
  return s;
}

std::string save_trainer_state(const std::string& run_dir, const std::string& keep_slot, const TrainerState& st,
                               const SyncState& update, Communicator& comm, const std::string& config_json) {
  return save_checkpoint(run_dir, keep_slot, {"vdt train sft", st.step, st.to_json(), update, config_json}, comm);
}

std::optional<LoadedState> load_trainer_state(const std::string& path, bool allow_none, bool allow_corrupt) {
  auto ck = load_checkpoint(path, allow_none, "vdt train sft", "--resume", allow_corrupt, "--ignore_corrupt_state");
  if (!ck) return std::nullopt;
  LoadedState out;
  static_cast<LoadedCheckpoint&>(out) = std::move(*ck);
  out.st = TrainerState::from_json(out.train_state, out.slot + "/trainer_state.json");
  return out;
}

ResumePoint resume_position(const TrainerState& saved, const Geometry& now) {
  const auto& was = saved.geometry;
  if (saved.has_epoch) {
    const uint64_t counter = saved.pos.micro_counter * was.num_processes;  // global micro batches so far
    Geometry same_world = was;
    same_world.num_processes = now.num_processes, same_world.n_micro = now.n_micro;
    if (was.grad_accum * was.num_processes == now.grad_accum * now.num_processes)
      same_world.grad_accum = now.grad_accum;
    if (!(was == now) && same_world == now) {
      // Only the world size changed (with --grad_accum alongside, keeping the global batch). The permutation is
      // global and rank r takes positions r, r + world, ...: the stream continues exactly when the global positions
      // consumed split evenly over the new ranks.
      const int64_t used = saved.pos.epoch_micro * was.num_processes;
      if (used % now.num_processes == 0 && counter % static_cast<uint64_t>(now.num_processes) == 0) {
        const int64_t skip = used / now.num_processes;
        const uint64_t c = counter / static_cast<uint64_t>(now.num_processes);
        const std::string how = "exact (world size " + std::to_string(was.num_processes) + " -> " +
                                std::to_string(now.num_processes) + ": same global sample stream";
        if (skip >= now.n_micro) return {saved.pos.epoch + 1, 0, how + "; the epoch was used up)", c};
        return {saved.pos.epoch, skip, how + ")", c};
      }
    }
    const uint64_t c = counter / static_cast<uint64_t>(now.num_processes);
    if (!(was == now)) return {saved.pos.epoch + 1, 0, "geometry changed: starting the next epoch", c};
    if (saved.pos.epoch_micro >= now.n_micro)
      return {saved.pos.epoch + 1, 0, "exact (the epoch was used up)", saved.pos.micro_counter};
    return {saved.pos.epoch, saved.pos.epoch_micro, "exact", saved.pos.micro_counter};
  }
  const int64_t spe = std::max<int64_t>((now.n_micro + now.grad_accum - 1) / now.grad_accum, 1);
  const int64_t epoch = saved.step / spe;
  return {epoch, std::min(now.n_micro, (saved.step - epoch * spe) * now.grad_accum),
          "state without an epoch: inferred from the step", saved.pos.micro_counter};
}

}  // namespace vdt
