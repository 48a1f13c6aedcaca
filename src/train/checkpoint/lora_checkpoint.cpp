#include "train/checkpoint/lora_checkpoint.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "core/state_slots.h"

namespace vdt {
namespace fs = std::filesystem;

std::string lora_step_path(const std::string& out, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "lora_step%05lld.safetensors", static_cast<long long>(step));
  return (fs::path(out) / name).string();
}

std::pair<int64_t, std::string> newest_lora_step(const std::string& out) {
  std::pair<int64_t, std::string> best{0, ""};
  if (!fs::is_directory(out)) return best;
  static const std::regex pattern("lora_step([0-9]+)\\.safetensors");
  for (const auto& e : fs::directory_iterator(out)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    const std::string digits = m[1].str();
    const auto first = digits.find_first_not_of('0');
    VDT_CHECK(first == std::string::npos || digits.size() - first <= 18, e.path().string(),
              ": the step number in this LoRA file name has ", digits.size(), " digits, more than a 64-bit step holds",
              "\n---> HINT: rename or remove the file (vdt writes lora_stepNNNNN.safetensors)");
    const int64_t step = std::stoll(digits);
    if (step > best.first) best = {step, e.path().string()};
  }
  return best;
}

std::string save_causal_state(const std::string& out, const std::string& config_json, const std::string& keep,
                              const CausalPosition& pos, const SyncState& update, Communicator& comm) {
  CheckpointParts parts;
  parts.trainer = "vdt train causal", parts.step = pos.step, parts.update = update, parts.replicated = true;
  parts.train_state = {{"samples_seen", pos.samples_seen}, {"world", pos.world}, {"model_config", pos.model_config}};
  parts.config_json = config_json;
  return save_checkpoint(out, keep, parts, comm);
}

std::optional<CausalState> find_causal_state(const std::string& out, int64_t step, std::vector<std::string>* notes,
                                             bool allow_corrupt) {
  std::optional<LoadedCheckpoint> ck;
  try {
    ck =
        load_checkpoint(out, /*allow_none=*/true, "vdt train causal", "--out", allow_corrupt, "--ignore-corrupt-state");
  } catch (const CorruptStateError&) {
    throw;
  } catch (const Error& e) {  // e.g. a slot of an older layout: the Python trainer's resume (fresh moments) still works
    notes->push_back(std::string("the state is not usable: ") + e.what());
    return std::nullopt;
  }
  if (!ck) return std::nullopt;
  const auto& j = ck->train_state;
  const int64_t at = j.value("step", int64_t{-1});
  if (step >= 0 && at != step) {
    notes->push_back(ck->slot + " holds step " + std::to_string(at) + ", not the newest LoRA's step " +
                     std::to_string(step));
    return std::nullopt;
  }
  CausalState st;
  st.dir = ck->slot;
  st.pos = {at, j.value("samples_seen", int64_t{0}), j.value("world", int64_t{1}),
            j.value("model_config", std::string())};
  st.checkpoint = std::move(*ck);
  return st;
}

torch::Tensor CausalState::full(const std::string& kind, const std::string& name) const {
  return checkpoint.full(kind, name);
}

int64_t CausalState::optimizer_steps() const { return checkpoint.optimizer_steps(); }

}  // namespace vdt
