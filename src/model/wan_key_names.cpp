#include "model/wan_key_names.h"

#include <array>
#include <regex>
#include <utility>

namespace vdt {

namespace {

// (ours, diffusers) name fragments; a name is matched on its module path, the parameter suffix (.weight, .bias)
// carried over. Block-level entries apply under "blocks.N.".
const std::array<std::pair<const char*, const char*>, 7> kTop = {{
    {"text_embedding.0", "condition_embedder.text_embedder.linear_1"},
    {"text_embedding.2", "condition_embedder.text_embedder.linear_2"},
    {"time_embedding.0", "condition_embedder.time_embedder.linear_1"},
    {"time_embedding.2", "condition_embedder.time_embedder.linear_2"},
    {"time_projection.1", "condition_embedder.time_proj"},
    {"head.head", "proj_out"},
    {"head.modulation", "scale_shift_table"},
}};
const std::array<std::pair<const char*, const char*>, 15> kBlock = {{
    {"self_attn.q", "attn1.to_q"},
    {"self_attn.k", "attn1.to_k"},
    {"self_attn.v", "attn1.to_v"},
    {"self_attn.o", "attn1.to_out.0"},
    {"self_attn.norm_q", "attn1.norm_q"},
    {"self_attn.norm_k", "attn1.norm_k"},
    {"cross_attn.q", "attn2.to_q"},
    {"cross_attn.k", "attn2.to_k"},
    {"cross_attn.v", "attn2.to_v"},
    {"cross_attn.o", "attn2.to_out.0"},
    {"cross_attn.norm_q", "attn2.norm_q"},
    {"cross_attn.norm_k", "attn2.norm_k"},
    {"norm3", "norm2"},
    {"ffn.0", "ffn.net.0.proj"},
    {"ffn.2", "ffn.net.2"},
}};

// `rest` equals `from` or continues it with ".<suffix>": the suffix (with its dot), else nullopt-like false.
bool match(const std::string& rest, const std::string& from, std::string* suffix) {
  if (rest == from) return suffix->clear(), true;
  if (rest.size() > from.size() && rest.compare(0, from.size(), from) == 0 && rest[from.size()] == '.') {
    *suffix = rest.substr(from.size());
    return true;
  }
  return false;
}

std::string translate(const std::string& name, bool to_diffusers) {
  static const std::regex block(R"(^(blocks\.\d+\.)(.*)$)");
  std::smatch m;
  std::string suffix;
  if (std::regex_match(name, m, block)) {
    const std::string head = m[1], rest = m[2];
    if (to_diffusers ? rest == "modulation" : rest == "scale_shift_table")
      return head + (to_diffusers ? "scale_shift_table" : "modulation");
    for (const auto& [ours, theirs] : kBlock)
      if (match(rest, to_diffusers ? ours : theirs, &suffix)) return head + (to_diffusers ? theirs : ours) + suffix;
    return to_diffusers ? name : "";
  }
  for (const auto& [ours, theirs] : kTop)
    if (match(name, to_diffusers ? ours : theirs, &suffix)) return std::string(to_diffusers ? theirs : ours) + suffix;
  if (match(name, "patch_embedding", &suffix)) return name;
  return to_diffusers ? name : "";
}

}  // namespace

std::string wan_to_diffusers(const std::string& name) { return translate(name, true); }

std::string wan_from_diffusers(const std::string& name) { return translate(name, false); }

std::string strip_wrapper_prefix(const std::string& key) {
  for (const char* p : {"model.diffusion_model.", "diffusion_model.", "model."}) {
    const std::string prefix = p;
    if (key.rfind(prefix, 0) == 0) return key.substr(prefix.size());
  }
  return key;
}

bool is_diffusers_wan_key(const std::string& key) {
  return strip_wrapper_prefix(key) == "condition_embedder.time_proj.weight";
}

std::string wan_canonical_key(const std::string& key, bool diffusers) {
  const std::string k = strip_wrapper_prefix(key);
  if (!diffusers) return k;
  const std::string ours = wan_from_diffusers(k);
  return ours.empty() ? k : ours;  // gc_sem_cond.* and patch_embedding.* are the same in both layouts
}

}  // namespace vdt
