// The checkpointer. The slot is chosen by rank 0 and broadcast (0 = state_A, 1 = state_B); shards are written by
// every rank (rank 0 alone when replicated), then rank 0 writes the JSON parts and seals the slot.
#include "train/checkpoint/checkpointer.h"

#include <torch/torch.h>

#include <algorithm>
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

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const std::string& keep_slot, const CheckpointParts& parts,
                            Communicator& comm) {
  const int rank = comm.rank(), world = comm.world();
  std::string slot_dir;
  try {
    std::unique_ptr<SlotWriter> w;
    if (rank == 0) w = std::make_unique<SlotWriter>(run_dir, keep_slot);
    auto which = torch::full({1}, w && fs::path(w->dir()).filename() == "state_B" ? 1 : 0, torch::kInt32);
    if (world > 1) {
      const auto& any = parts.update.weights;
      auto dev = any.empty() ? which : which.to(any.front().second.device());
      comm.broadcast(dev, 0)->wait();
      which = dev.cpu();
    }
    slot_dir = (fs::path(run_dir) / (which.item<int>() == 1 ? "state_B" : "state_A")).string();
    Metadata meta = parts.update.meta;
    meta["step"] = std::to_string(parts.step);
    meta["trainer"] = parts.trainer;
    const int shards = parts.replicated ? 1 : world;
    if (!parts.replicated || rank == 0) {
      const int r = parts.replicated ? 0 : rank;
      save_safetensors((fs::path(slot_dir) / shard_name("weights", r, shards)).string(), parts.update.weights, meta);
      save_safetensors((fs::path(slot_dir) / shard_name("optimizer", r, shards)).string(), parts.update.optimizer,
                       meta);
    }
    comm.barrier();
    if (w) {
      auto state = parts.train_state;
      state["step"] = parts.step;
      state["trainer"] = parts.trainer;
      w->write_text(kStateFile, state.dump(2) + "\n");
      if (!parts.config_json.empty()) w->write_text("config.json", parts.config_json + "\n");
      w->commit({{"step", parts.step}, {"world", world}});
    }
    comm.barrier();
  } catch (const Error& e) {
    const std::string keep = fs::path(run_dir) / "state";
    VDT_FAIL("saving the training state at step ", parts.step, " into ", slot_dir.empty() ? run_dir : slot_dir,
             " failed:\n  ", e.what(), "\nThe previous state (", keep, ") is intact; the partial slot was removed.\n",
             "---> HINT: free disk space under ", run_dir, ", then run again (the state is found in ", run_dir, ")");
  }
  return slot_dir;
}

torch::Tensor LoadedCheckpoint::full(const std::string& kind, const std::string& name) const {
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

int64_t LoadedCheckpoint::optimizer_steps() const {
  for (const auto& f : optimizer_files)
    for (const auto& k : f->keys())
      if (k.rfind("step.", 0) == 0) return static_cast<int64_t>(f->get(k).item<double>());
  VDT_FAIL(slot, ": the optimizer state has no step count");
}

std::optional<LoadedCheckpoint> load_checkpoint(const std::string& path, bool allow_none, const std::string& trainer,
                                                const std::string& flag, bool allow_corrupt,
                                                const std::string& corrupt_flag) {
  std::error_code ec;
  VDT_CHECK(fs::exists(path, ec) || allow_none, flag, " ", path, ": no such file or directory");
  std::vector<std::string> notes;
  const auto slot = fs::exists(path, ec) ? find_slot(path, &notes) : std::nullopt;
  for (const auto& n : notes) std::printf("[resume] %s\n", n.c_str());
  if (!slot) {
    std::string why;
    for (const auto& n : notes) why += "\n  " + n;
    const auto sealed = fs::exists(path, ec) ? sealed_slots(run_dir_of(path)) : std::vector<std::string>{};
    if (allow_none && !sealed.empty() && !allow_corrupt)
      throw CorruptStateError(detail::concat(
          flag, " ", path, ": every sealed state slot is corrupt, so the run cannot continue:", why,
          "\n---> HINT: restore the run directory from a copy; or pass ",
          corrupt_flag.empty() ? "a fresh --output" : corrupt_flag,
          " to start from step 0 on purpose (the corrupt slots are overwritten, the logs are moved aside)"));
    if (allow_none) {
      if (!sealed.empty())
        std::printf("[resume] %s: every sealed state slot is corrupt; starting from step 0 (%s)\n", path.c_str(),
                    corrupt_flag.c_str());
      return std::nullopt;
    }
    VDT_FAIL(flag, " ", path, ": no complete state slot (state_A/ or state_B/ with a valid slot.json)",
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
  const std::string wrote = j.value("trainer", "vdt train sft");  // states written before the field were SFT's
  VDT_CHECK(wrote == trainer, file, ": this state was written by `", wrote, "`, this run is `", trainer, "`",
            "\n---> HINT: give this trainer its own run directory");
  LoadedCheckpoint out;
  out.slot = slot->dir;
  out.train_state = j;
  out.weight_files = open_shards(slot->dir, "weights");
  out.optimizer_files = open_shards(slot->dir, "optimizer");
  return out;
}

}  // namespace vdt
