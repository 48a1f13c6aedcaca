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

namespace {
constexpr const char* kTensorsFile = "causal_state.safetensors";
constexpr const char* kConfigFile = "config.json";
}  // namespace

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
    const int64_t step = std::stoll(m[1].str());
    if (step > best.first) best = {step, e.path().string()};
  }
  return best;
}

std::string save_causal_state(const std::string& out, const std::string& keep, const CausalPosition& pos,
                              const NamedTensors& lora, const NamedTensors& optimizer, const std::string& config_json) {
  SlotWriter w(out, keep);
  NamedTensors all;
  for (const auto& [k, t] : lora) all.emplace_back("lora." + k, t);
  for (const auto& [k, t] : optimizer) all.emplace_back("optim." + k, t);
  save_safetensors(w.path(kTensorsFile), all, {{"step", std::to_string(pos.step)}});
  w.write_text(kConfigFile, config_json + "\n");
  w.commit({{"step", pos.step}, {"samples_seen", pos.samples_seen}, {"world", pos.world},
            {"model_config", pos.model_config}});
  return w.dir();
}

std::string save_lora_step(const CausalConfig& cfg, const std::string& path, const std::string& keep,
                           const CausalPosition& pos, const NamedTensors& lora, const SyncState& update) {
  NamedTensors bf16;
  for (const auto& [n, p] : lora) bf16.emplace_back(n, p.detach().to(torch::kBFloat16).to(torch::kCPU));
  save_safetensors(path, bf16,
                   {{"format", "pt"}, {"base", cfg.model}, {"weights", cfg.weights}, {"step", std::to_string(pos.step)},
                    {"objective", cfg.objective}, {"span_chunks", std::to_string(kSpanChunks)},
                    {"level_shift", py_float(cfg.level_shift)}, {"chunk_frames", std::to_string(cfg.chunk_frames)},
                    {"rank", std::to_string(cfg.lora_rank)}, {"alpha", py_float(cfg.lora_alpha)},
                    {"seed", std::to_string(cfg.seed)}, {"val_clips", std::to_string(cfg.val_clips)},
                    {"clean_first_frame", cfg.clean_first_frame ? "1" : "0"}});
  NamedTensors f32, optim;
  for (const auto& [n, p] : lora) f32.emplace_back(n, p.detach().to(torch::kCPU));
  for (const auto& [k, t] : update.optimizer) optim.emplace_back(k, t.to(torch::kCPU));
  return save_causal_state(cfg.out, keep, pos, f32, optim, cfg.to_json());
}

torch::Tensor CausalState::full(const std::string& kind, const std::string& name) const {
  const std::string key = kind == "weight" ? "lora." + name : "optim." + kind + "." + name;
  VDT_CHECK(tensors->contains(key), dir, ": no '", key, "' (a different --lora-rank or model?)");
  return tensors->get(key);
}

int64_t CausalState::optimizer_steps() const {
  for (const auto& k : tensors->keys())
    if (k.rfind("optim.step.", 0) == 0) return static_cast<int64_t>(tensors->get(k).item<double>());
  return pos.step;
}

std::optional<CausalState> find_causal_state(const std::string& out, int64_t step, std::vector<std::string>* notes) {
  auto slot = find_slot(out, notes);
  if (!slot) return std::nullopt;
  const int64_t at = slot->info.value("step", int64_t{-1});
  if (at != step) {
    notes->push_back(slot->dir + " holds step " + std::to_string(at) + ", not the newest LoRA's step " +
                     std::to_string(step));
    return std::nullopt;
  }
  CausalState st;
  st.dir = slot->dir;
  st.pos = {at, slot->info.value("samples_seen", int64_t{0}), slot->info.value("world", int64_t{1}),
            slot->info.value("model_config", std::string())};
  st.tensors = SafetensorsFile::open((fs::path(slot->dir) / kTensorsFile).string());
  return st;
}

}  // namespace vdt
