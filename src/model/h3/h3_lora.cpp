#include "model/h3/h3_lora.h"

#include <torch/torch.h>

#include <array>

#include "core/error.h"

namespace vdt {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// A split module name in vdt's naming: the fused module and which part of it (q, k, v; 'u' for the MLP's [up; gate]
// rows; 0 for a module that maps one to one). Empty when `m` is not in the split naming.
std::string vdt_name(std::string m, char* part) {
  *part = 0;
  if (starts_with(m, "transformer.")) m = m.substr(12);
  bool split = false;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"transformer_blocks.", "blocks."},
                                 {"token_refiner.refiner_blocks.", "token_refiner.blocks."}})
    if (starts_with(m, from)) m = to + m.substr(from.size()), split = true;
  static const std::array<std::tuple<const char*, const char*, char>, 6> suffixes = {{
      {".attn.to_q", ".attn.qkv_proj", 'q'},
      {".attn.to_k", ".attn.qkv_proj", 'k'},
      {".attn.to_v", ".attn.qkv_proj", 'v'},
      {".attn.to_out.0", ".attn.out_proj", 0},
      {".ff.net.0.proj", ".mlp.fc1", 'u'},
      {".ff.net.2", ".mlp.fc2", 0},
  }};
  for (const auto& [from, to, p] : suffixes)
    if (ends_with(m, from)) {
      *part = p;
      return m.substr(0, m.size() - std::string(from).size()) + to;
    }
  return split ? m : "";  // e.g. a split block's module that is not a LoRA target: named, refused by the caller
}

}  // namespace

bool h3_lora_is_split(const LoraWeights& w) {
  char part = 0;
  for (const auto& [m, p] : w.modules)
    if (!vdt_name(m, &part).empty()) return true;
  return false;
}

LoraWeights h3_lora_from_split(const LoraWeights& w, int64_t head_dim, const std::string& where) {
  const int64_t r = w.rank, R = 3 * w.rank;
  std::map<std::string, std::array<const LoraPair*, 3>> qkv;  // fused module -> q, k, v
  LoraWeights out;
  out.rank = R, out.alpha = 3 * w.alpha, out.base = w.base;
  auto padded = [&](const torch::Tensor& a, const torch::Tensor& b) {  // rank r -> R with zeros
    LoraPair p;
    p.a = torch::cat({a, torch::zeros({R - r, a.size(1)}, a.options())}, 0);  // [R, in]
    p.b = torch::cat({b, torch::zeros({b.size(0), R - r}, b.options())}, 1);  // [out, R]
    return p;
  };
  for (const auto& [m, p] : w.modules) {
    char part = 0;
    std::string name = vdt_name(m, &part);
    if (name.empty()) name = m;  // already vdt's name (a file may mix both)
    VDT_CHECK(ends_with(name, ".qkv_proj") || ends_with(name, ".out_proj") || ends_with(name, ".fc1") ||
                  ends_with(name, ".fc2"),
              where, ": LoRA module '", m, "' is not an H3 LoRA target (attn.to_q/to_k/to_v, attn.to_out.0, ",
              "ff.net.0.proj, ff.net.2 or vdt's attn.qkv_proj, attn.out_proj, mlp.fc1, mlp.fc2)");
    if (part == 'q' || part == 'k' || part == 'v') {
      auto& slot = qkv[name][part == 'q' ? 0 : part == 'k' ? 1 : 2];
      VDT_CHECK(slot == nullptr, where, ": two LoRA modules give the ", part, " part of '", name, "'");
      slot = &p;
      continue;
    }
    VDT_CHECK(!out.modules.count(name), where, ": LoRA module '", m, "' and another module of the file both give '",
              name, "'");
    auto b = p.b;
    if (part == 'u') {  // diffusers' [up; gate] rows -> the checkpoint's [gate; up]
      VDT_CHECK(b.size(0) % 2 == 0, where, ": LoRA module '", m, "' has lora_B ", b.sizes(), ", expected [2 F, r]");
      const int64_t F = b.size(0) / 2;
      b = torch::cat({b.narrow(0, F, F), b.narrow(0, 0, F)}, 0);
    }
    out.modules[name] = padded(p.a, b);
  }
  for (const auto& [name, parts] : qkv) {
    VDT_CHECK(!out.modules.count(name), where, ": '", name, "' is in the file both fused and split");
    const LoraPair* any = parts[0] ? parts[0] : parts[1] ? parts[1] : parts[2];
    const int64_t inner = any->b.size(0), in = any->a.size(1);
    VDT_CHECK(head_dim > 0 && inner % head_dim == 0, where, ": LoRA of '", name, "': lora_B has ", inner,
              " rows, not a whole number of heads of ", head_dim);
    const int64_t heads = inner / head_dim;
    auto a = torch::zeros({R, in}, any->a.options());
    auto b = torch::zeros({heads, 3, head_dim, R}, any->b.options());  // rows h·3Dh + part·Dh + d
    for (int64_t j = 0; j < 3; ++j) {
      if (!parts[static_cast<size_t>(j)]) continue;  // a part without LoRA: zeros
      const auto& pj = *parts[static_cast<size_t>(j)];
      VDT_CHECK(pj.b.size(0) == inner && pj.a.size(1) == in, where, ": the q/k/v LoRAs of '", name,
                "' differ in shape");
      a.narrow(0, j * r, r).copy_(pj.a);
      b.select(1, j).narrow(2, j * r, r).copy_(pj.b.reshape({heads, head_dim, r}));
    }
    out.modules[name] = LoraPair{a, b.view({3 * inner, R})};
  }
  return out;
}

LoraWeights h3_lora_for_base(const LoraWeights& w, const SafetensorsSet& base, const std::string& where) {
  if (!h3_lora_is_split(w)) return w;
  const std::string key = "blocks.0.attn.q_norm.weight";
  VDT_CHECK(base.contains(key), where,
            ": a LoRA in diffusers' split naming (to_q/to_k/to_v) needs an H3 base, and the ", "base has no '", key,
            "'");
  return h3_lora_from_split(w, base.entry(key).shape.at(0), where);
}

}  // namespace vdt
