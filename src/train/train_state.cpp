#include "train/train_state.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/state_slots.h"

namespace fs = std::filesystem;

namespace vdt {
namespace {

constexpr const char* kStateFile = "trainer_state.json";

std::string shard_name(const std::string& stem, int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%05d-of-%05d.safetensors", stem.c_str(), rank, world);
  return buf;
}

SafetensorsSet open_shards(const std::string& slot, const std::string& stem) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(slot))
    if (e.path().filename().string().rfind(stem + "-", 0) == 0 && e.path().extension() == ".safetensors")
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  VDT_CHECK(!files.empty(), slot, ": no ", stem, "-*.safetensors in the state slot");
  return SafetensorsSet::open(files);
}

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
  return {{"num_processes", num_processes}, {"grad_accum", grad_accum}, {"batch_size", batch_size},
          {"n_micro", n_micro}, {"n_train", n_train}, {"seed", seed}};
}

nlohmann::ordered_json TrainerState::to_json() const {
  nlohmann::ordered_json j = {{"step", step}, {"arm", "gc25d"}, {"vocab", vocab}, {"res", res},
                              {"init_ckpt", init_ckpt}, {"model", model}, {"precision", precision},
                              {"epoch", pos.epoch}, {"epoch_micro", pos.epoch_micro},
                              {"micro_counter", pos.micro_counter}, {"trainer", "vdt train sft"}};
  const auto geo = geometry.to_json();
  for (const auto& [k, v] : geo.items()) j[k] = v;  // flat, as the seed writes it
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
                               const NamedTensors& weights, const NamedTensors& optimizer, int rank, int world) {
  std::string slot_dir;
  try {
    SlotWriter w(run_dir, keep_slot);
    slot_dir = w.dir();
    Metadata meta = {{"step", std::to_string(st.step)}, {"trainer", "vdt train sft"}};
    save_safetensors(w.path(shard_name("weights", rank, world)), weights, meta);
    save_safetensors(w.path(shard_name("optimizer", rank, world)), optimizer, meta);
    w.write_text(kStateFile, st.to_json().dump(2) + "\n");
    w.commit({{"step", st.step}, {"world", world}});
  } catch (const Error& e) {
    const std::string keep = fs::path(run_dir) / "state";
    VDT_FAIL("saving the training state at step ", st.step, " into ", slot_dir.empty() ? run_dir : slot_dir,
             " failed:\n  ", e.what(), "\nThe previous state (", keep, ") is intact; the partial slot was removed.\n",
             "---> HINT: free disk space under ", run_dir, ", then resume with --resume ", run_dir);
  }
  return slot_dir;
}

std::optional<LoadedState> load_trainer_state(const std::string& path, bool allow_none) {
  std::error_code ec;
  VDT_CHECK(fs::exists(path, ec) || allow_none, "--resume ", path, ": no such file or directory");
  std::vector<std::string> notes;
  const auto slot = fs::exists(path, ec) ? find_slot(path, &notes) : std::nullopt;
  for (const auto& n : notes) std::printf("[resume] %s\n", n.c_str());
  if (!slot) {
    if (allow_none) return std::nullopt;
    std::string why;
    for (const auto& n : notes) why += "\n  " + n;
    VDT_FAIL("--resume ", path, ": no complete state slot (state_A/ or state_B/ with a valid slot.json)",
             why.empty() ? std::string(" was found") : ":" + why,
             "\n---> HINT: pass a run directory written with --save_state, or a step-N.safetensors export to warm "
             "start");
  }
  const std::string file = (fs::path(slot->dir) / kStateFile).string();
  std::ifstream f(file);
  VDT_CHECK(f.good(), file, ": cannot read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    VDT_FAIL(file, ": malformed JSON (", e.what(), ")");
  }
  return LoadedState{slot->dir, TrainerState::from_json(j, file), open_shards(slot->dir, "weights"),
                     open_shards(slot->dir, "optimizer")};
}

ResumePoint resume_position(const TrainerState& saved, const Geometry& now) {
  if (saved.has_epoch) {
    if (!(saved.geometry == now))
      return {saved.pos.epoch + 1, 0, "geometry changed: starting the next epoch"};
    if (saved.pos.epoch_micro >= now.n_micro) return {saved.pos.epoch + 1, 0, "exact (the epoch was used up)"};
    return {saved.pos.epoch, saved.pos.epoch_micro, "exact"};
  }
  const int64_t spe = std::max<int64_t>((now.n_micro + now.grad_accum - 1) / now.grad_accum, 1);
  const int64_t epoch = saved.step / spe;
  return {epoch, std::min(now.n_micro, (saved.step - epoch * spe) * now.grad_accum),
          "state without an epoch: inferred from the step"};
}

}  // namespace vdt
