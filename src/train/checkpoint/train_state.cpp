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

constexpr const char* kStateFile = "trainer_state.json";

std::string shard_name(const std::string& stem, int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%05d-of-%05d.safetensors", stem.c_str(), rank, world);
  return buf;
}

std::vector<std::shared_ptr<SafetensorsFile>> open_shards(const std::string& slot, const std::string& stem) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(slot))
    if (e.path().filename().string().rfind(stem + "-", 0) == 0 && e.path().extension() == ".safetensors")
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  VDT_CHECK(!files.empty(), slot, ": no ", stem, "-*.safetensors in the state slot");
  std::vector<std::shared_ptr<SafetensorsFile>> out;
  for (const auto& f : files) out.push_back(SafetensorsFile::open(f));
  return out;
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
  if (!model_config.empty()) j["model_config"] = model_config;
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
                               const NamedTensors& weights, const NamedTensors& optimizer, Communicator& comm,
                               const Metadata& shard_meta) {
  const int rank = comm.rank(), world = comm.world();
  std::string slot_dir;
  try {
    std::unique_ptr<SlotWriter> w;
    if (rank == 0) w = std::make_unique<SlotWriter>(run_dir, keep_slot);
    // Every rank writes into the slot rank 0 chose (0 = state_A, 1 = state_B).
    auto which = torch::full({1}, w && fs::path(w->dir()).filename() == "state_B" ? 1 : 0, torch::kInt32);
    if (world > 1) {
      auto dev = weights.empty() ? which : which.to(weights.front().second.device());
      comm.broadcast(dev, 0)->wait();
      which = dev.cpu();
    }
    slot_dir = (fs::path(run_dir) / (which.item<int>() == 1 ? "state_B" : "state_A")).string();
    Metadata meta = shard_meta;
    meta["step"] = std::to_string(st.step);
    meta["trainer"] = "vdt train sft";
    save_safetensors((fs::path(slot_dir) / shard_name("weights", rank, world)).string(), weights, meta);
    save_safetensors((fs::path(slot_dir) / shard_name("optimizer", rank, world)).string(), optimizer, meta);
    comm.barrier();
    if (w) {
      w->write_text(kStateFile, st.to_json().dump(2) + "\n");
      w->commit({{"step", st.step}, {"world", world}});
    }
    comm.barrier();
  } catch (const Error& e) {
    const std::string keep = fs::path(run_dir) / "state";
    VDT_FAIL("saving the training state at step ", st.step, " into ", slot_dir.empty() ? run_dir : slot_dir,
             " failed:\n  ", e.what(), "\nThe previous state (", keep, ") is intact; the partial slot was removed.\n",
             "---> HINT: free disk space under ", run_dir, ", then resume with --resume ", run_dir);
  }
  return slot_dir;
}

torch::Tensor LoadedState::full(const std::string& kind, const std::string& name) const {
  const auto& files = kind == "weight" ? weight_files : optimizer_files;
  const auto& meta = weight_files.front()->metadata();
  const auto it = meta.find("zero2_layout");
  if (it == meta.end()) {  // per-parameter tensors (possibly split over files by name)
    const std::string key = kind == "weight" ? name : kind + "." + name;
    for (const auto& f : files)
      if (f->contains(key)) return f->get(key);
    VDT_FAIL(slot, ": the state has no '", key, "'");
  }
  const auto layout = nlohmann::json::parse(it->second);
  const auto& buckets = layout.at("buckets");
  for (size_t k = 0; k < buckets.size(); ++k)
    for (const auto& p : buckets[k].at("params")) {
      if (p.at(0).get<std::string>() != name) continue;
      const std::string key = (kind == "weight" ? "master" : kind) + ".bucket" + std::to_string(k);
      auto hit = bucket_cache_.find(key);
      if (hit == bucket_cache_.end()) {
        if (bucket_cache_.size() > 6) bucket_cache_.clear();  // parameters are asked for bucket by bucket
        std::vector<torch::Tensor> slices;
        for (const auto& f : files) {
          VDT_CHECK(f->contains(key), f->path(), ": the state shard has no '", key, "'");
          slices.push_back(f->get(key));
        }
        hit = bucket_cache_.emplace(key, torch::cat(slices)).first;
      }
      const auto& whole = hit->second;
      return whole.narrow(0, p.at(1).get<int64_t>(), p.at(2).get<int64_t>());
    }
  VDT_FAIL(slot, ": parameter '", name, "' is in no bucket of the state's ZeRO-2 layout");
}

int64_t LoadedState::optimizer_steps() const {
  for (const auto& f : optimizer_files)
    for (const auto& k : f->keys())
      if (k.rfind("step.", 0) == 0) return static_cast<int64_t>(f->get(k).item<double>());
  VDT_FAIL(slot, ": the optimizer state has no step count");
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
  LoadedState out;
  out.slot = slot->dir;
  out.st = TrainerState::from_json(j, file);
  out.weight_files = open_shards(slot->dir, "weights");
  out.optimizer_files = open_shards(slot->dir, "optimizer");
  return out;
}

ResumePoint resume_position(const TrainerState& saved, const Geometry& now) {
  const auto& was = saved.geometry;
  if (saved.has_epoch) {
    const uint64_t counter = saved.pos.micro_counter * was.num_processes;  // global micro batches so far
    Geometry same_world = was;
    same_world.num_processes = now.num_processes, same_world.n_micro = now.n_micro;
    if (was.grad_accum * was.num_processes == now.grad_accum * now.num_processes) same_world.grad_accum = now.grad_accum;
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
