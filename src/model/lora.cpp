#include "model/lora.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_lora_target(const std::string& module, const std::vector<std::string>& targets) {
  for (const auto& t : targets)
    if (module == t || ends_with(module, "." + t)) return true;
  return false;
}

std::string lora_module_of(const std::string& key, char* which) {
  for (const char w : {'A', 'B'})
    for (const std::string suffix : {std::string(".lora_") + w + ".weight", std::string(".lora_") + w + ".default.weight"})
      if (ends_with(key, suffix)) {
        std::string m = key.substr(0, key.size() - suffix.size());
        for (const char* prefix : {"base_model.model.", "diffusion_model.", "dit."})
          if (m.rfind(prefix, 0) == 0) m = m.substr(std::string(prefix).size());
        if (which) *which = w;
        return m;
      }
  return "";
}

LoraWeights read_lora(const std::string& path, double default_alpha) {
  auto f = SafetensorsFile::open(path);
  LoraWeights out;
  for (const auto& key : f->keys()) {
    char w = 0;
    const std::string m = lora_module_of(key, &w);
    if (m.empty()) continue;
    auto& pair = out.modules[m];
    auto t = f->get(key);
    VDT_CHECK(t.dim() == 2, path, ": '", key, "' has shape ", t.sizes(), ", a LoRA factor must be 2-D");
    (w == 'A' ? pair.a : pair.b) = t;
  }
  VDT_CHECK(!out.modules.empty(), path, ": no LoRA tensors (<module>.lora_A.weight / .lora_B.weight)");
  for (const auto& [m, p] : out.modules) {
    VDT_CHECK(p.a.defined() && p.b.defined(), path, ": module '", m, "' has only lora_", p.a.defined() ? "A" : "B");
    VDT_CHECK(p.b.size(1) == p.a.size(0), path, ": module '", m, "': lora_B ", p.b.sizes(), " does not chain with lora_A ",
              p.a.sizes());
    if (out.rank == 0) out.rank = p.a.size(0);
    VDT_CHECK(p.a.size(0) == out.rank, path, ": module '", m, "' has rank ", p.a.size(0), ", others have ", out.rank);
  }
  const auto& meta = f->metadata();
  for (const char* k : {"alpha", "lora_alpha"})
    if (meta.count(k)) out.alpha = std::stod(meta.at(k));
  if (out.alpha == 0) out.alpha = default_alpha > 0 ? default_alpha : static_cast<double>(out.rank);
  if (meta.count("rank"))
    VDT_CHECK(std::stoll(meta.at("rank")) == out.rank, path, ": metadata rank ", meta.at("rank"),
              " but the tensors have rank ", out.rank);
  if (meta.count("base")) out.base = meta.at("base");
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> merge_lora(const SafetensorsSet& base, const LoraWeights& lora,
                                                              double scale) {
  torch::NoGradGuard ng;
  std::map<std::string, const LoraPair*> by_weight;
  for (const auto& [m, p] : lora.modules) {
    const std::string key = m + ".weight";
    VDT_CHECK(base.contains(key), "merge-lora: the LoRA module '", m, "' has no '", key, "' in the base weights");
    const auto& e = base.entry(key);
    VDT_CHECK(e.shape.size() == 2 && e.shape[0] == p.b.size(0) && e.shape[1] == p.a.size(1), "merge-lora: '", key,
              "' is [", e.shape[0], ", ", e.shape.size() > 1 ? e.shape[1] : 0, "] but its LoRA gives [", p.b.size(0),
              ", ", p.a.size(1), "]");
    by_weight[key] = &p;
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& key : base.keys()) {
    auto w = base.get(key);
    if (auto it = by_weight.find(key); it != by_weight.end()) {
      const auto& p = *it->second;
      auto merged = w.to(torch::kFloat32) + scale * torch::matmul(p.b.to(torch::kFloat32), p.a.to(torch::kFloat32));
      w = merged.to(w.scalar_type());
    }
    out.emplace_back(key, w);
  }
  return out;
}

torch::Tensor lora_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                          const LoraPair& lora, double scale) {
  auto y = torch::nn::functional::linear(x, w, bias);
  return y + scale * torch::nn::functional::linear(torch::nn::functional::linear(x, lora.a), lora.b);
}

}  // namespace vdt
