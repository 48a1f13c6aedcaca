// Presets follow docs/h3_model.md §1.1 (Ref2VA/transformer/config.json = DiffSynth's defaults); `h3-tiny` is the config
// of fixtures/h3_tiny_a. The tensor list follows docs/h3_model.md §1.9: 11 top-level + 8 per refiner block + 1 + 10 per
// DiT block + 7 final-layer tensors.
#include "model/h3/h3_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace vdt {

void H3Config::validate() const {
  VDT_CHECK(num_layers > 0 && refiner_layers >= 0, "h3 model: num_layers ", num_layers, " must be positive and ",
            "refiner_layers ", refiner_layers, " non-negative");
  VDT_CHECK(hidden > 0 && heads > 0 && head_dim > 0 && ffn > 0, "h3 model: hidden ", hidden, ", heads ", heads,
            ", head_dim ", head_dim, ", ffn ", ffn, " must all be positive");
  VDT_CHECK(rope_len > 0 && 6 * rope_len <= head_dim, "h3 model: RoPE rotates 6*rope_len = ", 6 * rope_len,
            " head channels, which must be positive and at most head_dim ", head_dim);
  VDT_CHECK(latent_channels > 0 && audio_channels > 0 && text_dim > 0, "h3 model: latent_channels ", latent_channels,
            ", audio_channels ", audio_channels, ", text_dim ", text_dim, " must all be positive");
  VDT_CHECK(patch[0] > 0 && patch[1] > 0 && patch[2] > 0, "h3 model: patch sizes must be positive");
  VDT_CHECK(time_freq_dim > 0 && time_freq_dim % 2 == 0, "h3 model: time_freq_dim ", time_freq_dim,
            " must be positive and even ([cos | sin] halves)");
  VDT_CHECK(time_hidden > 0 && time_dim > 0, "h3 model: time_hidden ", time_hidden, " and time_dim ", time_dim,
            " must be positive");
  VDT_CHECK(norm_eps > 0 && qk_norm_eps > 0 && final_norm_eps > 0, "h3 model: eps values must be positive");
}

std::string H3Config::to_json() const {
  nlohmann::json j = {{"num_layers", num_layers},
                      {"token_refiner_num_layers", refiner_layers},
                      {"hidden_size", hidden},
                      {"num_attention_heads", heads},
                      {"attention_head_dim", head_dim},
                      {"ffn_hidden_size", ffn},
                      {"latents_dim", latent_channels},
                      {"audio_latents_dim", audio_channels},
                      {"patch_size", patch},
                      {"text_dim", text_dim},
                      {"timestep_input_dim", time_freq_dim},
                      {"time_embed_hidden_size", time_hidden},
                      {"time_embed_dim", time_dim},
                      {"adaln_out_features", adaln_out()},
                      {"final_adaln_out_features", final_adaln_out()},
                      {"rope_inv_freq_len", rope_len},
                      {"norm_eps", norm_eps},
                      {"qk_norm_eps", qk_norm_eps},
                      {"final_norm_eps", final_norm_eps},
                      {"preset", preset}};
  return j.dump();
}

H3Config H3Config::from_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    VDT_FAIL(where, ": h3 model config is not valid JSON (", e.what(), ")");
  }
  VDT_CHECK(j.is_object(), where, ": h3 model config must be a JSON object");
  H3Config c;  // DiffSynth's constructor defaults
  c.preset = j.value("preset", std::string("custom"));
  auto geti = [&](const char* key, int64_t& v) {
    if (!j.contains(key)) return;
    VDT_CHECK(j[key].is_number_integer(), where, ": h3 model config '", key, "' must be an integer, got ",
              j[key].dump());
    v = j[key].get<int64_t>();
  };
  auto getd = [&](const char* key, double& v) {
    if (!j.contains(key)) return;
    VDT_CHECK(j[key].is_number(), where, ": h3 model config '", key, "' must be a number, got ", j[key].dump());
    v = j[key].get<double>();
  };
  geti("num_layers", c.num_layers);
  geti("token_refiner_num_layers", c.refiner_layers);
  geti("hidden_size", c.hidden);
  geti("num_attention_heads", c.heads);
  geti("attention_head_dim", c.head_dim);
  geti("ffn_hidden_size", c.ffn);
  geti("latents_dim", c.latent_channels);
  geti("audio_latents_dim", c.audio_channels);
  geti("text_dim", c.text_dim);
  geti("timestep_input_dim", c.time_freq_dim);
  geti("time_embed_hidden_size", c.time_hidden);
  geti("time_embed_dim", c.time_dim);
  geti("rope_inv_freq_len", c.rope_len);
  getd("norm_eps", c.norm_eps);
  getd("qk_norm_eps", c.qk_norm_eps);
  getd("final_norm_eps", c.final_norm_eps);
  if (j.contains("patch_size")) {
    const auto p = j["patch_size"].get<std::vector<int64_t>>();
    VDT_CHECK(p.size() == 3, where, ": h3 model config 'patch_size' must have 3 entries, got ", p.size());
    c.patch = {p[0], p[1], p[2]};
  }
  // The two AdaLN widths are constructor arguments but fixed by hidden_size (3 x 6 x D, 2 x D in the reference).
  int64_t adaln = c.adaln_out(), final_adaln = c.final_adaln_out();
  geti("adaln_out_features", adaln);
  geti("final_adaln_out_features", final_adaln);
  VDT_CHECK(adaln == c.adaln_out(), where, ": adaln_out_features ", adaln,
            " must be 3 modalities x 6 x hidden_size = ", c.adaln_out());
  VDT_CHECK(final_adaln == c.final_adaln_out(), where, ": final_adaln_out_features ", final_adaln,
            " must be 2 x hidden_size = ", c.final_adaln_out());
  c.validate();
  return c;
}

bool H3Config::same_architecture(const H3Config& o) const {
  return num_layers == o.num_layers && refiner_layers == o.refiner_layers && hidden == o.hidden && heads == o.heads &&
         head_dim == o.head_dim && ffn == o.ffn && latent_channels == o.latent_channels &&
         audio_channels == o.audio_channels && patch == o.patch && text_dim == o.text_dim &&
         time_freq_dim == o.time_freq_dim && time_hidden == o.time_hidden && time_dim == o.time_dim &&
         rope_len == o.rope_len;
}

std::vector<std::string> h3_preset_names() { return {"minimax-h3", "h3-tiny"}; }

H3Config h3_preset(const std::string& name) {
  H3Config c;
  c.preset = name;
  if (name == "minimax-h3") return c;
  if (name == "h3-tiny") {  // fixtures/h3_tiny_a: the real quirks (inner width != D, partial RoPE) at small size
    c.num_layers = 2, c.refiner_layers = 1, c.hidden = 64, c.heads = 2, c.head_dim = 40, c.ffn = 96;
    c.text_dim = 48, c.time_hidden = 64, c.time_dim = 32, c.rope_len = 4;
    return c;
  }
  std::string known;
  for (const auto& n : h3_preset_names()) known += (known.empty() ? "" : ", ") + n;
  VDT_FAIL("--model: unknown H3 preset '", name, "'; known presets: ", known);
}

std::map<std::string, std::vector<int64_t>> h3_checkpoint_shapes(const H3Config& c) {
  const int64_t D = c.hidden;
  std::map<std::string, std::vector<int64_t>> s;
  s["video_patch_proj.weight"] = {D, c.video_dim()};
  s["video_patch_proj.bias"] = {D};
  s["audio_patch_proj.weight"] = {D, c.audio_channels};
  s["audio_patch_proj.bias"] = {D};
  s["condition_proj.weight"] = {D, c.text_dim};
  s["condition_proj.bias"] = {D};
  s["time_embedder.proj_in.weight"] = {c.time_hidden, c.time_freq_dim};
  s["time_embedder.proj_in.bias"] = {c.time_hidden};
  s["time_embedder.proj_out.weight"] = {c.time_dim, c.time_hidden};
  s["time_embedder.proj_out.bias"] = {c.time_dim};
  s["rope.inv_freq"] = {c.rope_len};
  auto block = [&](const std::string& p) {
    s[p + "norm1.weight"] = {D};
    s[p + "norm2.weight"] = {D};
    s[p + "attn.qkv_proj.weight"] = {3 * c.inner(), D};
    s[p + "attn.q_norm.weight"] = {c.head_dim};
    s[p + "attn.k_norm.weight"] = {c.head_dim};
    s[p + "attn.out_proj.weight"] = {D, c.inner()};
    s[p + "mlp.fc1.weight"] = {2 * c.ffn, D};
    s[p + "mlp.fc2.weight"] = {D, c.ffn};
  };
  for (int64_t i = 0; i < c.refiner_layers; ++i) block("token_refiner.blocks." + std::to_string(i) + ".");
  s["token_refiner.final_norm.weight"] = {D};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    block(p);
    s[p + "adaln_proj.linear.weight"] = {c.adaln_out(), c.time_dim};
    s[p + "adaln_proj.linear.bias"] = {c.adaln_out()};
  }
  s["final_layer.norm.weight"] = {D};
  s["final_layer.adaln_proj.linear.weight"] = {c.final_adaln_out(), c.time_dim};
  s["final_layer.adaln_proj.linear.bias"] = {c.final_adaln_out()};
  s["final_layer.video_out.weight"] = {c.video_dim(), D};
  s["final_layer.video_out.bias"] = {c.video_dim()};
  s["final_layer.audio_out.weight"] = {c.audio_channels, D};
  s["final_layer.audio_out.bias"] = {c.audio_channels};
  return s;
}

H3Config detect_h3_config(const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& where) {
  auto shape = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    auto it = shapes.find(key);
    VDT_CHECK(it != shapes.end(), where, ": not an H3 DiT checkpoint: tensor '", key, "' is missing");
    VDT_CHECK(it->second.size() == rank, where, ": tensor '", key, "' has rank ", it->second.size(), ", expected ",
              rank);
    return it->second;
  };
  H3Config c;
  const auto& vp = shape("video_patch_proj.weight", 2);  // [D, C*pt*ph*pw]
  c.hidden = vp[0];
  // The patch cannot be read from a Linear: H3 uses (1, 2, 2) throughout (model_fn_minimax_h3 hard-codes 96 = 24*4).
  VDT_CHECK(vp[1] % 4 == 0, where, ": video_patch_proj.weight is ", vp[0], "x", vp[1], "; its input width must be ",
            "latent channels x 4 (patch 1x2x2)");
  c.latent_channels = vp[1] / 4;
  c.audio_channels = shape("audio_patch_proj.weight", 2)[1];
  c.text_dim = shape("condition_proj.weight", 2)[1];
  const auto& ti = shape("time_embedder.proj_in.weight", 2);
  c.time_hidden = ti[0], c.time_freq_dim = ti[1];
  c.time_dim = shape("time_embedder.proj_out.weight", 2)[0];
  c.rope_len = shape("rope.inv_freq", 1)[0];
  c.head_dim = shape("blocks.0.attn.q_norm.weight", 1)[0];
  const int64_t qkv_rows = shape("blocks.0.attn.qkv_proj.weight", 2)[0];
  VDT_CHECK(qkv_rows % (3 * c.head_dim) == 0, where, ": blocks.0.attn.qkv_proj.weight has ", qkv_rows,
            " rows, not a multiple of 3 x head_dim ", c.head_dim);
  c.heads = qkv_rows / (3 * c.head_dim);
  c.ffn = shape("blocks.0.mlp.fc2.weight", 2)[1];
  c.num_layers = 0;
  while (shapes.count("blocks." + std::to_string(c.num_layers) + ".norm1.weight")) ++c.num_layers;
  c.refiner_layers = 0;
  while (shapes.count("token_refiner.blocks." + std::to_string(c.refiner_layers) + ".norm1.weight")) ++c.refiner_layers;
  c.preset = "custom";
  for (const auto& name : h3_preset_names()) {
    if (h3_preset(name).same_architecture(c)) {
      c.preset = name;
      break;
    }
  }
  c.validate();
  return c;
}

}  // namespace vdt
