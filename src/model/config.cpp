// Presets follow docs/design.md §1 (TI2V-5B) and the Wan2.1 T2V-1.3B release; `tiny` is ours for tests
// and the CPU demo. Detection reads the shapes that pin each field (patch embedding, FFN, text and time MLPs, head).
#include "model/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace vdt {

void ModelConfig::validate() const {
  VDT_CHECK(dim > 0 && num_heads > 0 && dim % num_heads == 0, "model: dim ", dim,
            " must be a positive multiple of num_heads ", num_heads);
  const int64_t dh = head_dim();
  VDT_CHECK(dh % 2 == 0 && dh >= 6, "model: head dim ", dh, " (dim/num_heads) must be even and >= 6 for 3-axis RoPE");
  VDT_CHECK(ffn_dim > 0 && num_layers > 0 && in_dim > 0 && out_dim > 0 && text_dim > 0, "model: ffn_dim ", ffn_dim,
            ", num_layers ", num_layers, ", in_dim ", in_dim, ", out_dim ", out_dim, ", text_dim ", text_dim,
            " must all be positive");
  VDT_CHECK(freq_dim > 0 && freq_dim % 2 == 0, "model: freq_dim ", freq_dim, " must be positive and even");
  VDT_CHECK(patch[0] > 0 && patch[1] > 0 && patch[2] > 0, "model: patch sizes must be positive");
  VDT_CHECK(eps > 0, "model: eps must be positive, got ", eps);
}

std::string ModelConfig::to_json() const {
  nlohmann::json j = {{"dim", dim},       {"ffn_dim", ffn_dim},  {"num_heads", num_heads}, {"num_layers", num_layers},
                      {"in_dim", in_dim}, {"out_dim", out_dim},  {"text_dim", text_dim},   {"freq_dim", freq_dim},
                      {"eps", eps},       {"patch_size", patch}, {"preset", preset}};
  return j.dump();
}

ModelConfig ModelConfig::from_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    VDT_FAIL(where, ": model config is not valid JSON (", e.what(), ")");
  }
  ModelConfig c;
  c.preset = j.value("preset", std::string("custom"));
  auto req = [&](const char* key) -> const nlohmann::json& {
    VDT_CHECK(j.contains(key), where, ": model config lacks '", key, "'");
    return j[key];
  };
  c.dim = req("dim").get<int64_t>();
  c.ffn_dim = req("ffn_dim").get<int64_t>();
  c.num_heads = req("num_heads").get<int64_t>();
  c.num_layers = req("num_layers").get<int64_t>();
  c.in_dim = req("in_dim").get<int64_t>();
  c.out_dim = req("out_dim").get<int64_t>();
  c.text_dim = j.value("text_dim", int64_t{4096});
  c.freq_dim = j.value("freq_dim", int64_t{256});
  c.eps = j.value("eps", 1e-6);
  if (j.contains("patch_size")) {
    auto p = j["patch_size"].get<std::vector<int64_t>>();
    VDT_CHECK(p.size() == 3, where, ": patch_size must have 3 entries");
    c.patch = {p[0], p[1], p[2]};
  }
  c.validate();
  return c;
}

bool ModelConfig::same_architecture(const ModelConfig& o) const {
  return dim == o.dim && ffn_dim == o.ffn_dim && num_heads == o.num_heads && num_layers == o.num_layers &&
         in_dim == o.in_dim && out_dim == o.out_dim && text_dim == o.text_dim && freq_dim == o.freq_dim &&
         patch == o.patch;
}

std::vector<std::string> preset_names() { return {"wan2.2-ti2v-5b", "wan2.1-t2v-1.3b", "tiny"}; }

ModelConfig preset_config(const std::string& name) {
  ModelConfig c;
  c.preset = name;
  if (name == "wan2.2-ti2v-5b") return c;
  if (name == "wan2.1-t2v-1.3b") {
    c.dim = 1536, c.ffn_dim = 8960, c.num_heads = 12, c.num_layers = 30, c.in_dim = 16, c.out_dim = 16;
    return c;
  }
  if (name == "tiny") {  // small enough to train on a CPU in minutes; 16 latent channels, 64-wide text
    c.dim = 128, c.ffn_dim = 384, c.num_heads = 4, c.num_layers = 2, c.in_dim = 16, c.out_dim = 16, c.text_dim = 64;
    return c;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  VDT_FAIL("--model: unknown preset '", name, "'; known presets: ", known);
}

ModelConfig detect_config(const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& where) {
  auto shape = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    auto it = shapes.find(key);
    VDT_CHECK(it != shapes.end(), where, ": not a Wan DiT checkpoint: tensor '", key, "' is missing");
    VDT_CHECK(it->second.size() == rank, where, ": tensor '", key, "' has rank ", it->second.size(), ", expected ",
              rank);
    return it->second;
  };
  ModelConfig c;
  const auto& pe = shape("patch_embedding.weight", 5);  // [D, C, pt, ph, pw]
  c.dim = pe[0], c.in_dim = pe[1], c.patch = {pe[2], pe[3], pe[4]};
  c.ffn_dim = shape("blocks.0.ffn.0.weight", 2)[0];
  c.text_dim = shape("text_embedding.0.weight", 2)[1];
  c.freq_dim = shape("time_embedding.0.weight", 2)[1];
  c.out_dim = shape("head.head.weight", 2)[0] / c.patch_volume();
  int64_t layers = 0;
  while (shapes.count("blocks." + std::to_string(layers) + ".modulation")) ++layers;
  c.num_layers = layers;
  c.num_heads = c.dim % 128 == 0 ? c.dim / 128 : 1;  // Wan uses head dim 128; shapes cannot tell the head count
  c.preset = "custom";
  for (const auto& name : preset_names()) {
    const ModelConfig p = preset_config(name);
    if (p.dim == c.dim && p.ffn_dim == c.ffn_dim && p.num_layers == c.num_layers && p.in_dim == c.in_dim &&
        p.out_dim == c.out_dim && p.text_dim == c.text_dim && p.freq_dim == c.freq_dim && p.patch == c.patch)
      return p;
  }
  return c;
}

}  // namespace vdt
