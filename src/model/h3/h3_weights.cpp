// Strict H3 weight checks: the error lists up to 20 names of each kind, as model/weights_io does for Wan.
#include "model/h3/h3_weights.h"

#include <torch/torch.h>

#include <set>
#include <sstream>

#include "core/error.h"

namespace vdt {
namespace {

std::string strip_model_prefix(const std::string& k) { return k.rfind("model.", 0) == 0 ? k.substr(6) : k; }

}  // namespace

H3Config detect_h3_config(const SafetensorsSet& files) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& k : files.keys()) shapes[strip_model_prefix(k)] = files.entry(k).shape;
  return detect_h3_config(shapes, files.files().front()->path());
}

void check_h3_weights(const SafetensorsSet& files, const H3Config& cfg, const LoadOptions& opts) {
  const auto want = h3_checkpoint_shapes(cfg);
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> seen;
  for (const auto& k : files.keys()) {
    if (has_prefix(k, opts.ignore_prefixes)) continue;
    const std::string name = strip_model_prefix(k);
    seen.insert(name);
    auto it = want.find(name);
    if (it == want.end()) {
      unexpected.push_back(k);
    } else if (files.entry(k).shape != it->second) {
      std::ostringstream os;
      os << k << ": file has " << at::IntArrayRef(files.entry(k).shape) << ", model expects "
         << at::IntArrayRef(it->second);
      mismatched.push_back(os.str());
    }
  }
  for (const auto& [name, shape] : want)
    if (!seen.count(name) && !has_prefix(name, opts.optional_prefixes)) missing.push_back(name);
  if (missing.empty() && unexpected.empty() && mismatched.empty()) return;
  std::string files_str;
  for (const auto& f : files.files()) files_str += (files_str.empty() ? "" : ", ") + f->path();
  std::ostringstream os;
  os << "H3 weights in " << files_str << " do not match the " << cfg.preset << " architecture:";
  if (!missing.empty()) os << "\n  " << missing.size() << " missing key(s):" << name_list(missing);
  if (!unexpected.empty()) os << "\n  " << unexpected.size() << " unexpected key(s):" << name_list(unexpected);
  if (!mismatched.empty()) os << "\n  " << mismatched.size() << " shape mismatch(es):" << name_list(mismatched);
  os << "\n---> HINT: check --model (or let vdt detect it from the weights) and that every shard is given";
  VDT_FAIL(os.str());
}

LoadReport load_h3_weights(H3DiTImpl& model, const SafetensorsSet& files, const LoadOptions& opts) {
  check_h3_weights(files, model.config(), opts);
  return load_weights(model, files, opts);
}

NamedTensors export_h3_weights(const H3DiTImpl& model, std::optional<torch::ScalarType> dtype) {
  NamedTensors out;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    auto want = t.scalar_type();
    if (dtype) want = H3DiTImpl::is_fp32_island(name) ? torch::kFloat32 : *dtype;
    out.emplace_back(name, t.detach().to(want));
  };
  for (const auto& kv : model.named_parameters()) add(kv.key(), kv.value());
  for (const auto& kv : model.named_buffers()) add(kv.key(), kv.value());
  return out;
}

}  // namespace vdt
