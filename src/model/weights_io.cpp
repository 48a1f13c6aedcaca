// Strict weight loading: the error lists up to 20 names of each kind so a wrong checkpoint is recognised at once.
#include "model/weights_io.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "model/wan_key_names.h"

namespace vdt {
bool has_prefix(const std::string& s, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (s.rfind(p, 0) == 0) return true;
  return false;
}

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  const size_t n = std::min<size_t>(names.size(), 20);
  for (size_t i = 0; i < n; ++i) out += "\n    " + names[i];
  if (names.size() > n) out += "\n    ... and " + std::to_string(names.size() - n) + " more";
  return out;
}

namespace {

// Our name -> the key as stored in the files: our own name, or with DiffSynth's "model." or ComfyUI's
// "model.diffusion_model." prefix, or diffusers' WanTransformer3DModel name (model/wan_key_names.h).
std::map<std::string, std::string> stored_keys(const SafetensorsSet& files) {
  bool diffusers = false;
  for (const auto& k : files.keys()) diffusers = diffusers || is_diffusers_wan_key(k);
  std::map<std::string, std::string> out;
  for (const auto& k : files.keys()) {
    const std::string name = wan_canonical_key(k, diffusers);
    if (!out.count(name) || name == k) out[name] = k;  // a key stored under our exact name wins
  }
  return out;
}

std::string stored_key(const std::map<std::string, std::string>& keys, const std::string& name) {
  auto it = keys.find(name);
  return it == keys.end() ? std::string() : it->second;
}

}  // namespace

std::vector<std::string> weight_files(const std::string& file_or_dir, const std::string& flag) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(file_or_dir)) return {file_or_dir};
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(file_or_dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  // A diffusers pipeline directory (e.g. Wan2.2-TI2V-5B-Diffusers) keeps the DiT under transformer/.
  if (files.empty() && fs::is_directory(fs::path(file_or_dir) / "transformer"))
    return weight_files((fs::path(file_or_dir) / "transformer").string(), flag);
  std::sort(files.begin(), files.end());
  VDT_CHECK(!files.empty(), flag, " ", file_or_dir, ": no .safetensors files in this directory");
  return files;
}

LoadReport load_weights(torch::nn::Module& module, const SafetensorsSet& files, const LoadOptions& opts) {
  torch::NoGradGuard ng;
  LoadReport report;
  std::vector<std::string> missing, mismatched, unexpected;
  std::set<std::string> used;
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  const auto keys = stored_keys(files);
  for (auto& kv : module.named_parameters()) targets.emplace_back(kv.key(), kv.value());
  for (auto& kv : module.named_buffers()) targets.emplace_back(kv.key(), kv.value());
  for (auto& [name, dst] : targets) {
    const std::string key = stored_key(keys, name);
    if (key.empty()) {
      (has_prefix(name, opts.optional_prefixes) ? report.kept : missing).push_back(name);
      continue;
    }
    used.insert(key);
    const auto& e = files.entry(key);
    if (at::IntArrayRef(e.shape) != dst.sizes()) {
      std::ostringstream os;
      os << key << ": file has " << at::IntArrayRef(e.shape) << ", model expects " << dst.sizes();
      mismatched.push_back(os.str());
      continue;
    }
    report.loaded.push_back(name);
  }
  for (const auto& k : files.keys())
    if (!used.count(k) && !has_prefix(k, opts.ignore_prefixes)) unexpected.push_back(k);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string files_str;
    for (const auto& f : files.files()) files_str += (files_str.empty() ? "" : ", ") + f->path();
    std::ostringstream os;
    os << "weights in " << files_str << " do not match the model:";
    if (!missing.empty()) os << "\n  " << missing.size() << " missing key(s):" << name_list(missing);
    if (!unexpected.empty()) os << "\n  " << unexpected.size() << " unexpected key(s):" << name_list(unexpected);
    if (!mismatched.empty()) os << "\n  " << mismatched.size() << " shape mismatch(es):" << name_list(mismatched);
    os << "\n---> HINT: check --model (or let vdt detect it from the weights) and that every shard is given; vdt reads "
          "Wan weights under the original names (blocks.N.self_attn.q.weight), diffusers' WanTransformer3DModel "
          "names (blocks.N.attn1.to_q.weight) and the \"model.\" / \"model.diffusion_model.\" prefixes";
    VDT_FAIL(os.str());
  }
  std::vector<std::string> non_finite;
  for (auto& [name, dst] : targets) {
    const std::string key = stored_key(keys, name);
    if (key.empty()) continue;
    dst.copy_(files.get(key));
    // NaN/Inf weights make the first loss non-finite, whose message would blame --lr or the data: name the file.
    if (dst.is_floating_point() && !torch::isfinite(dst).all().item<bool>())
      non_finite.push_back(key + " (" + std::to_string((~torch::isfinite(dst)).sum().item<int64_t>()) + " values)");
  }
  if (!non_finite.empty()) {
    std::string files_str;
    for (const auto& f : files.files()) files_str += (files_str.empty() ? "" : ", ") + f->path();
    VDT_FAIL("weights in ", files_str, " hold NaN/Inf values in ", non_finite.size(),
             " tensor(s):", name_list(non_finite),
             "\n---> HINT: the weights file is damaged or was saved after a diverged step; "
             "`vdt ckpt check` lists them. Use an earlier checkpoint");
  }
  return report;
}

NamedTensors named_parameters(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& kv : module.named_parameters()) out.emplace_back(kv.key(), kv.value());
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> export_weights(const torch::nn::Module& module,
                                                                  torch::ScalarType dtype) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& kv : module.named_parameters()) out.emplace_back(kv.key(), kv.value().detach().to(dtype));
  return out;
}

ModelConfig detect_config(const SafetensorsSet& files) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, key] : stored_keys(files)) shapes[name] = files.entry(key).shape;
  return detect_config(shapes, files.files().front()->path());
}

}  // namespace vdt
