#include "model/lora.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "model/kept_ops.h"

namespace vdt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The sets attached to a model and the one its forwards add: one object shared by all its LoRA Linears.
struct LoraSelection {
  std::string active;
  std::vector<std::string> sets;
};

// Each set's scale on an attached Linear, and the model's selection: a parameter-free child, so it is not saved with
// the weights.
class LoraScaleImpl : public torch::nn::Module {
 public:
  explicit LoraScaleImpl(std::shared_ptr<LoraSelection> s) : selection(std::move(s)) {}
  std::map<std::string, double> scales;  // by set
  std::shared_ptr<LoraSelection> selection;
};
TORCH_MODULE(LoraScale);

// The children of a set's factors: lora_A / lora_B for the default set, lora_A_<set> / lora_B_<set> for another.
std::string factor_name(char which, const std::string& set) {
  return std::string("lora_") + which + (set.empty() ? "" : "_" + set);
}

// The model's selection (null when no LoRA is attached).
std::shared_ptr<LoraSelection> selection_of(torch::nn::Module& model) {
  for (const auto& m : model.modules(/*include_self=*/false))
    if (auto sc = std::dynamic_pointer_cast<LoraScaleImpl>(m)) return sc->selection;
  return nullptr;
}

// The active set's factors on `linear` (A [r, in], B [out, r]) and scale; false when it carries none.
bool active_factors(const torch::nn::Linear& linear, torch::Tensor* a, torch::Tensor* b, double* scale) {
  if (linear->children().empty()) return false;
  const auto kids = linear->named_children();
  const auto* sc_mod = kids.find("lora_scale");
  if (!sc_mod) return false;
  const auto* sc = (*sc_mod)->as<LoraScaleImpl>();
  const std::string& set = sc->selection->active;
  const auto* a_mod = kids.find(factor_name('A', set));
  if (!a_mod) return false;  // kNoLora, or a set that does not target this Linear
  *a = (*a_mod)->as<torch::nn::Linear>()->weight;
  *b = kids[factor_name('B', set)]->as<torch::nn::Linear>()->weight;
  *scale = sc->scales.at(set);
  return true;
}

// Linears by module name whose name is a LoRA target.
std::vector<std::pair<std::string, std::shared_ptr<torch::nn::LinearImpl>>> target_linears(
    torch::nn::Module& model, const std::vector<std::string>& targets) {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::LinearImpl>>> out;
  for (const auto& kv : model.named_modules("", /*include_self=*/false))
    if (auto lin = std::dynamic_pointer_cast<torch::nn::LinearImpl>(kv.value()))
      if (is_lora_target(kv.key(), targets) && kv.key().find(".lora_") == std::string::npos)
        out.emplace_back(kv.key(), lin);
  return out;
}

}  // namespace

bool is_lora_target(const std::string& module, const std::vector<std::string>& targets) {
  for (const auto& t : targets)
    if (module == t || ends_with(module, "." + t)) return true;
  return false;
}

std::string lora_module_of(const std::string& key, char* which) {
  for (const char w : {'A', 'B'})
    for (const std::string& suffix :
         {std::string(".lora_") + w + ".weight", std::string(".lora_") + w + ".default.weight"})
      if (ends_with(key, suffix)) {
        std::string m = key.substr(0, key.size() - suffix.size());
        for (const char* prefix : {"base_model.model.", "diffusion_model.", "dit."})
          if (m.rfind(prefix, 0) == 0) m = m.substr(std::string(prefix).size());
        if (which) *which = w;
        return m;
      }
  return "";
}

namespace {
// The alpha of kohya's per-module `<module>.alpha` tensors (0: the file has none). One vdt LoRA has one scale, so
// every module's must be the same and belong to a module of the file; errors name the key.
double alpha_tensors(const SafetensorsFile& f, const LoraWeights& w, const std::string& path) {
  double alpha = 0;
  std::string first;
  for (const auto& key : f.keys()) {
    if (key.size() < 7 || key.compare(key.size() - 6, 6, ".alpha") != 0) continue;
    std::string m = key.substr(0, key.size() - 6);
    for (const char* prefix : {"base_model.model.", "diffusion_model.", "dit."})
      if (m.rfind(prefix, 0) == 0) m = m.substr(std::string(prefix).size());
    VDT_CHECK(w.modules.count(m), path, ": '", key, "' is the alpha of no LoRA module in the file");
    const auto t = f.get(key);
    VDT_CHECK(t.numel() == 1, path, ": '", key, "' has shape ", t.sizes(), ", an alpha is one number");
    const double a = t.to(torch::kFloat64).item<double>();
    VDT_CHECK(a > 0, path, ": '", key, "' is ", a, ", an alpha must be > 0");
    if (first.empty()) alpha = a, first = key;
    VDT_CHECK(std::abs(a - alpha) <= 1e-6 * alpha, path, ": '", key, "' is ", a, " but '", first, "' is ", alpha,
              "; vdt applies one alpha per LoRA file\n---> HINT: merge the LoRA elsewhere, or rescale its B factors "
              "to one alpha");
  }
  return alpha;
}
}  // namespace

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
    VDT_CHECK(p.b.size(1) == p.a.size(0), path, ": module '", m, "': lora_B ", p.b.sizes(),
              " does not chain with lora_A ", p.a.sizes());
    if (out.rank == 0) out.rank = p.a.size(0);
    VDT_CHECK(p.a.size(0) == out.rank, path, ": module '", m, "' has rank ", p.a.size(0), ", others have ", out.rank);
  }
  const auto& meta = f->metadata();
  for (const char* k : {"alpha", "lora_alpha"})
    if (meta.count(k)) out.alpha = metadata_double(meta, k, path, 0);
  if (const double a = alpha_tensors(*f, out, path); a > 0) {
    VDT_CHECK(out.alpha == 0 || std::abs(out.alpha - a) <= 1e-6 * a, path, ": metadata alpha ", out.alpha,
              " but the <module>.alpha tensors say ", a,
              "\n---> HINT: the two must agree; rewrite the file's metadata");
    out.alpha = a;
  }
  if (out.alpha == 0) out.alpha = default_alpha > 0 ? default_alpha : static_cast<double>(out.rank);
  if (meta.count("rank"))
    VDT_CHECK(metadata_int(meta, "rank", path, 0) == out.rank, path, ": metadata rank ", meta.at("rank"),
              " but the tensors have rank ", out.rank);
  if (meta.count("base")) out.base = meta.at("base");
  return out;
}

LoraShape read_lora_shape(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  LoraShape out;
  for (const auto& key : f->keys()) {
    char w = 0;
    if (lora_module_of(key, &w).empty() || w != 'A') continue;
    const auto& shape = f->entry(key).shape;
    VDT_CHECK(shape.size() == 2, path, ": '", key, "' is not 2-D, a LoRA factor must be");
    out.rank = shape[0];
    break;
  }
  VDT_CHECK(out.rank > 0, path, ": no LoRA tensors (<module>.lora_A.weight / .lora_B.weight)");
  const auto& meta = f->metadata();
  for (const char* k : {"alpha", "lora_alpha"})
    if (meta.count(k)) out.alpha = std::stod(meta.at(k));
  if (out.alpha == 0)  // no metadata: kohya's per-module alpha (the first one; read_lora checks that they agree)
    for (const auto& key : f->keys())
      if (key.size() > 6 && key.compare(key.size() - 6, 6, ".alpha") == 0 && f->entry(key).shape.size() <= 1) {
        out.alpha = f->get(key).to(torch::kFloat64).item<double>();
        break;
      }
  if (out.alpha == 0) out.alpha = static_cast<double>(out.rank);
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

bool lora_active(const torch::nn::Linear& linear) {
  torch::Tensor a, b;
  double scale = 0;
  return active_factors(linear, &a, &b, &scale);
}

torch::Tensor lora_or_linear(torch::nn::Linear& linear, const torch::Tensor& x_in, InputAct act) {
  // GEMMs through kept_linear (model/kept_ops.h): selective checkpointing keeps the base output and A's [.., r]
  // output; B's GEMM (r x out, ~1 % of the base's) is recomputed with the elementwise work. Only the base GEMM may
  // run in FP8 (`--fp8`): the factors stay in the compute dtype.
  torch::Tensor a, b;
  double scale = 0;
  if (!active_factors(linear, &a, &b, &scale))
    return kept_linear(x_in, linear->weight, linear->bias, GemmRole::base, act);
  const auto x = input_act(x_in, act);  // A reads act(x) too
  auto y = kept_linear(x, linear->weight, linear->bias);
  // Factors in x's dtype (trainers keep them in float32 beside a bf16 base; the cast is part of the graph).
  const int64_t r = a.size(0), out = y.size(-1);
  auto h = kept_linear(x, a.to(x.scalar_type()), {}, GemmRole::lora).reshape({-1, r});  // [..., r] -> [M, r]
  // y + scale * h B^T as one GEMM accumulating into y (the BLAS beta = 1 epilogue): no separate full-size scale and
  // add over the output, forward or backward.
  return torch::addmm(y.reshape({-1, out}), h, b.to(x.scalar_type()).t(), /*beta=*/1, /*alpha=*/scale)
      .view(y.sizes());  // [M, out] -> [..., out]
}

std::vector<torch::Tensor> lora_or_linear_shared_input(const std::vector<torch::nn::Linear*>& linears,
                                                       const torch::Tensor& x, bool fuse_lora_a) {
  std::vector<torch::Tensor> as, bs;
  std::vector<double> scales;
  std::vector<int64_t> ranks;
  bool fuse = fuse_lora_a && linears.size() > 1;
  for (auto* l : linears) {
    torch::Tensor a, b;
    double scale = 0;
    fuse = fuse && active_factors(*l, &a, &b, &scale);
    if (!fuse) break;
    as.push_back(a.to(x.scalar_type())), bs.push_back(b), scales.push_back(scale), ranks.push_back(a.size(0));
  }
  std::vector<torch::Tensor> out;
  if (!fuse) {  // the reference: one lora_or_linear per Linear
    for (auto* l : linears) out.push_back(lora_or_linear(*l, x));
    return out;
  }
  // One GEMM against the stacked A factors: [..., in] x [sum r, in]^T -> [..., sum r], split per Linear
  const auto h = kept_linear(x, torch::cat(as, 0), {}, GemmRole::lora).split_with_sizes(ranks, -1);
  for (size_t i = 0; i < linears.size(); ++i) {
    auto& lin = *linears[i];
    auto y = kept_linear(x, lin->weight, lin->bias);
    const int64_t out_dim = y.size(-1);
    out.push_back(torch::addmm(y.reshape({-1, out_dim}), h[i].reshape({-1, ranks[i]}), bs[i].to(x.scalar_type()).t(),
                               /*beta=*/1, /*alpha=*/scales[i])
                      .view(y.sizes()));  // as lora_or_linear: [M, out] -> [..., out]
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> attach_lora(torch::nn::Module& model, const LoraConfig& cfg,
                                                               uint64_t seed, const std::string& set) {
  VDT_CHECK(cfg.rank >= 1, "--lora-rank ", cfg.rank, ": expected >= 1");
  VDT_CHECK(set.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos, "LoRA set '", set,
            "': a set's name is lower-case letters, digits and '_'");
  const auto lins = target_linears(model, cfg.targets);
  VDT_CHECK(!lins.empty(), "LoRA: no Linear of the model matches the targets");
  auto selection = selection_of(model);
  if (!selection) {  // the first set: the base is frozen (a later set leaves the earlier sets' factors trainable)
    selection = std::make_shared<LoraSelection>(LoraSelection{set, {}});
    for (auto& p : model.parameters()) p.set_requires_grad(false);
  }
  VDT_CHECK(std::find(selection->sets.begin(), selection->sets.end(), set) == selection->sets.end(), "LoRA set '", set,
            "' is already attached");
  selection->sets.push_back(set);
  torch::NoGradGuard ng;
  auto gen = at::globalContext().defaultGenerator(torch::kCPU).clone();
  gen.set_current_seed(seed);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [name, lin] : lins) {
    const auto kids = lin->named_children();
    VDT_CHECK(!kids.contains(factor_name('A', set)), "LoRA: '", name, "' already has a LoRA attached");
    const int64_t in = lin->weight.size(1), outd = lin->weight.size(0);
    const auto opts = lin->weight.options();
    torch::nn::Linear a(torch::nn::LinearOptions(in, cfg.rank).bias(false));
    torch::nn::Linear b(torch::nn::LinearOptions(cfg.rank, outd).bias(false));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming-uniform(a=sqrt(5)), as PEFT's A
    a->weight.copy_(torch::empty({cfg.rank, in}).uniform_(-bound, bound, gen));
    b->weight.zero_();
    a->to(opts.device(), opts.dtype().toScalarType());
    b->to(opts.device(), opts.dtype().toScalarType());
    lin->register_module(factor_name('A', set), a);
    lin->register_module(factor_name('B', set), b);
    auto* scale = kids.find("lora_scale");
    auto sc = scale ? (*scale)->as<LoraScaleImpl>() : lin->register_module("lora_scale", LoraScale(selection)).get();
    sc->scales[set] = cfg.scale();
    a->weight.set_requires_grad(true);
    b->weight.set_requires_grad(true);
    out.emplace_back(name + ".lora_A.weight", a->weight);
    out.emplace_back(name + ".lora_B.weight", b->weight);
  }
  return out;
}

void set_active_lora(torch::nn::Module& model, const std::string& set) {
  auto selection = selection_of(model);
  VDT_CHECK(selection, "LoRA set '", set, "': the model has no LoRA attached");
  VDT_CHECK(set == kNoLora || std::find(selection->sets.begin(), selection->sets.end(), set) != selection->sets.end(),
            "LoRA set '", set, "' is not attached to the model");
  selection->active = set;
}

std::string active_lora(torch::nn::Module& model) {
  auto selection = selection_of(model);
  VDT_CHECK(selection, "active_lora: the model has no LoRA attached");
  return selection->active;
}

std::vector<std::string> lora_sets(torch::nn::Module& model) {
  auto selection = selection_of(model);
  return selection ? selection->sets : std::vector<std::string>{};
}

std::vector<std::pair<std::string, torch::Tensor>> lora_state(torch::nn::Module& model, const std::string& set) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& kv : model.named_modules("", /*include_self=*/false)) {
    auto lin = std::dynamic_pointer_cast<torch::nn::LinearImpl>(kv.value());
    if (!lin || lin->children().empty()) continue;
    const auto kids = lin->named_children();
    for (const char w : {'A', 'B'})
      if (const auto* f = kids.find(factor_name(w, set)))
        out.emplace_back(kv.key() + ".lora_" + w + ".weight", (*f)->as<torch::nn::Linear>()->weight);
  }
  return out;
}

void load_lora(torch::nn::Module& model, const LoraWeights& w, const std::string& where, const std::string& set) {
  torch::NoGradGuard ng;
  std::set<std::string> attached;
  for (const auto& kv : model.named_modules("", false)) {
    auto lin = std::dynamic_pointer_cast<torch::nn::LinearImpl>(kv.value());
    if (!lin || lin->children().empty()) continue;
    const auto kids = lin->named_children();
    if (!kids.contains(factor_name('A', set))) continue;
    const auto& name = kv.key();
    attached.insert(name);
    auto it = w.modules.find(name);
    VDT_CHECK(it != w.modules.end(), where, ": no LoRA for '", name, "' (the model has one attached there)");
    auto a = kids[factor_name('A', set)]->as<torch::nn::Linear>();
    auto b = kids[factor_name('B', set)]->as<torch::nn::Linear>();
    VDT_CHECK(it->second.a.sizes() == a->weight.sizes() && it->second.b.sizes() == b->weight.sizes(), where,
              ": LoRA of '", name, "' is A ", it->second.a.sizes(), " B ", it->second.b.sizes(), ", the model needs A ",
              a->weight.sizes(), " B ", b->weight.sizes());
    a->weight.copy_(it->second.a);
    b->weight.copy_(it->second.b);
    kids["lora_scale"]->as<LoraScaleImpl>()->scales[set] = w.alpha / static_cast<double>(w.rank);
  }
  VDT_CHECK(!attached.empty(), where, ": the model has no LoRA attached; attach one first");
  for (const auto& [m, p] : w.modules)
    VDT_CHECK(attached.count(m), where, ": LoRA module '", m, "' matches no attached Linear of the model");
}

int64_t merge_attached_lora(torch::nn::Module& model) {
  torch::NoGradGuard ng;
  const auto sets = lora_sets(model);
  VDT_CHECK(sets.size() <= 1 && (sets.empty() || sets[0].empty()), "merge-lora: the model holds ", sets.size(),
            " LoRA sets on one base (or a named one); merging would fold one into the base the others share");
  std::vector<std::shared_ptr<torch::nn::LinearImpl>> merged;
  for (const auto& kv : model.named_modules("", /*include_self=*/false))
    if (auto lin = std::dynamic_pointer_cast<torch::nn::LinearImpl>(kv.value()))
      if (!lin->children().empty() && lin->named_children().contains("lora_A")) merged.push_back(lin);
  for (auto& lin : merged) {
    const auto kids = lin->named_children();
    const auto a = kids["lora_A"]->as<torch::nn::Linear>()->weight.to(torch::kFloat32);  // [r, in]
    const auto b = kids["lora_B"]->as<torch::nn::Linear>()->weight.to(torch::kFloat32);  // [out, r]
    const double scale = kids["lora_scale"]->as<LoraScaleImpl>()->scales.at("");
    auto& w = lin->weight;  // [out, in]
    w.copy_(w.to(torch::kFloat32).addmm_(b, a, /*beta=*/1, /*alpha=*/scale));
    for (const char* name : {"lora_A", "lora_B", "lora_scale"}) lin->unregister_module(name);
  }
  return static_cast<int64_t>(merged.size());
}

torch::Tensor lora_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                          const LoraPair& lora, double scale) {
  auto y = torch::nn::functional::linear(x, w, bias);
  return y + scale * torch::nn::functional::linear(torch::nn::functional::linear(x, lora.a), lora.b);
}

}  // namespace vdt
