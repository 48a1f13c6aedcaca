#include "tools/ckpt_export.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/config.h"
#include "model/h3/h3_lora.h"
#include "model/lora.h"
#include "model/wan_key_names.h"
#include "model/weights_io.h"

namespace vdt {

namespace fs = std::filesystem;

const std::vector<ConfigField<ExportConfig>>& ExportConfig::fields() {
  using C = ExportConfig;
  static const std::vector<ConfigField<C>> f = {
      {"files", "safetensors file(s): an SFT export, Wan DiT shards, or one LoRA file", &C::files, true},
      {"--format", "diffusers (WanTransformer3DModel dir / PEFT LoRA) or comfy", &C::format, true},
      {"--out", "diffusers DiT: output directory; otherwise a .safetensors file (a directory gets a default name)",
       &C::out, true},
      {"--drop_adapter", "leave out the gc_sem_cond adapter (needed when the checkpoint has one: the targets lack it)",
       &C::drop_adapter},
      {"--num_heads", "attention heads of a custom-width DiT (0: from its metadata or preset)", &C::num_heads},
  };
  return f;
}

void ExportConfig::validate() const {
  VDT_CHECK(format == "diffusers" || format == "comfy", "--format: expected diffusers or comfy, got '", format, "'");
  VDT_CHECK(!files.empty(), "ckpt export: no input file given");
  VDT_CHECK(!out.empty(), "--out: required (a directory for a diffusers DiT, else a .safetensors file)");
}

namespace {

bool is_lora_file(const SafetensorsSet& files) {
  for (const auto& k : files.keys()) {
    char w = 0;
    if (!lora_module_of(k, &w).empty()) return true;
  }
  return false;
}

// diffusers' WanTransformer3DModel config.json for `mc` (the fields its constructor takes).
std::string diffusers_config(const ModelConfig& mc) {
  nlohmann::json j = {{"_class_name", "WanTransformer3DModel"},
                      {"_diffusers_version", "0.42.1"},
                      {"patch_size", {mc.patch[0], mc.patch[1], mc.patch[2]}},
                      {"num_attention_heads", mc.num_heads},
                      {"attention_head_dim", mc.head_dim()},
                      {"in_channels", mc.in_dim},
                      {"out_channels", mc.out_dim},
                      {"text_dim", mc.text_dim},
                      {"freq_dim", mc.freq_dim},
                      {"ffn_dim", mc.ffn_dim},
                      {"num_layers", mc.num_layers},
                      {"cross_attn_norm", true},
                      {"qk_norm", "rms_norm_across_heads"},
                      {"eps", mc.eps},
                      {"image_dim", nullptr},
                      {"added_kv_proj_dim", nullptr},
                      {"rope_max_seq_len", 1024},
                      {"pos_embed_seq_len", nullptr}};
  return j.dump(2) + "\n";
}

std::string file_out(const ExportConfig& cfg, const std::string& default_name) {
  if (fs::is_directory(cfg.out) || cfg.out.back() == '/') {
    fs::create_directories(cfg.out);
    return (fs::path(cfg.out) / default_name).string();
  }
  VDT_CHECK(fs::path(cfg.out).extension() == ".safetensors", "--out ", cfg.out,
            ": expected a .safetensors file or an existing directory for --format ", cfg.format);
  if (fs::path(cfg.out).has_parent_path()) fs::create_directories(fs::path(cfg.out).parent_path());
  return cfg.out;
}

ExportReport export_dit(const ExportConfig& cfg, const SafetensorsSet& files) {
  ExportReport rep;
  rep.kind = "dit";
  bool diffusers_in = false;
  for (const auto& k : files.keys()) diffusers_in = diffusers_in || is_diffusers_wan_key(k);
  NamedTensors ours;
  std::vector<std::string> adapter;
  for (const auto& k : files.keys()) {
    if (k.rfind("fixture.", 0) == 0) continue;
    const std::string name = wan_canonical_key(k, diffusers_in);
    if (name.rfind("gc_sem_cond.", 0) == 0) {
      adapter.push_back(name);
      continue;
    }
    ours.emplace_back(name, files.get(k));
  }
  VDT_CHECK(
      adapter.empty() || cfg.drop_adapter, files.files().front()->path(), ": holds vdt's gc_sem_cond adapter (",
      adapter.size(), " tensors), which ",
      cfg.format == "diffusers" ? "diffusers' WanTransformer3DModel" : "ComfyUI's Wan model",
      " does not have\n---> HINT: pass --drop-adapter to export the DiT without it (the exported model then ignores "
      "semantic maps; text and first-frame conditioning are unchanged)");
  rep.dropped = static_cast<int64_t>(adapter.size());
  ModelConfig mc = detect_config(files);  // also proves the keys are a Wan DiT
  const auto& src_meta = files.metadata();
  const fs::path hf_config = fs::path(files.files().front()->path()).parent_path() / "config.json";
  if (cfg.num_heads > 0) {
    mc.num_heads = cfg.num_heads;
  } else if (src_meta.count("config") || src_meta.count("vdt.config")) {  // a fixture's, or one we exported
    const std::string key = src_meta.count("config") ? "config" : "vdt.config";
    mc.num_heads = ModelConfig::from_json(src_meta.at(key), files.files().front()->path()).num_heads;
  } else if (diffusers_in && fs::exists(hf_config)) {  // a diffusers directory says it in its config.json
    const auto j = nlohmann::json::parse(std::ifstream(hf_config), nullptr, false);
    VDT_CHECK(!j.is_discarded() && j.contains("num_attention_heads"), hf_config.string(),
              ": not a WanTransformer3DModel config (no num_attention_heads)");
    mc.num_heads = j["num_attention_heads"].get<int64_t>();
  } else {
    VDT_CHECK(mc.preset != "custom" || cfg.format != "diffusers", files.files().front()->path(),
              ": a DiT of custom widths (dim ", mc.dim,
              ") without 'config' metadata: its attention head count cannot "
              "be read from the weights\n---> HINT: pass --num-heads N (Wan uses dim / 128)");
  }
  if (cfg.format == "diffusers") mc.validate();  // the head count only matters for diffusers' config.json
  Metadata meta = {{"format", "pt"}};
  for (const auto& [k, v] : files.metadata())  // the source's metadata, kept once under "vdt."
    if (k != "format") meta[k.rfind("vdt.", 0) == 0 ? k : "vdt." + k] = v;
  NamedTensors out;
  if (cfg.format == "diffusers") {
    fs::create_directories(cfg.out);
    for (auto& [name, t] : ours) out.emplace_back(wan_to_diffusers(name), t);
    std::ofstream(fs::path(cfg.out) / "config.json") << diffusers_config(mc);
    rep.written = (fs::path(cfg.out) / "diffusion_pytorch_model.safetensors").string();
  } else {
    for (auto& [name, t] : ours) out.emplace_back("model.diffusion_model." + name, t);
    rep.written = file_out(cfg, "diffusion_model.safetensors");
  }
  rep.tensors = static_cast<int64_t>(out.size());
  save_safetensors(rep.written, out, meta);
  return rep;
}

// diffusers' names exist here for the Wan modules only (model/wan_key_names.h). An H3 LoRA (vdt's names are the
// release's fused attn.qkv_proj / mlp.fc1 / ..., or diffusers' split to_q / ff.net.0.proj / ... when read from one)
// would come out under names no diffusers loader knows, so it is refused rather than written wrong.
void check_diffusers_names(const LoraWeights& lora, const std::string& file) {
  std::string foreign;
  for (const auto& [module, pair] : lora.modules)
    if (foreign.empty() && wan_to_diffusers(module) == module) foreign = module;
  const bool h3 = lora.base == "cwm" || h3_lora_is_split(lora) || foreign.find(".qkv_proj") != std::string::npos ||
                  foreign.find(".mlp.fc") != std::string::npos || foreign.find(".out_proj") != std::string::npos;
  VDT_CHECK(
      !h3, file,
      ": --format diffusers: this is an H3 (MiniMax-H3) LoRA, and vdt writes diffusers LoRA names "
      "for Wan bases only (H3 module '",
      foreign.empty() ? lora.modules.begin()->first : foreign, "')",
      "\n---> HINT: use the LoRA file as it is (vdt's names are the H3 release's module names), or fold it into the "
      "base weights with `vdt ckpt merge-lora --base <H3 weights> --lora ",
      file, " --out merged.safetensors`");
  VDT_CHECK(foreign.empty(), file, ": --format diffusers: LoRA module '", foreign,
            "' is not a Wan DiT module with a diffusers name (attention q/k/v/o, ffn.0, ffn.2, embeddings, head)",
            "\n---> HINT: export it with --format comfy (vdt's module names), or use the LoRA file as it is");
}

ExportReport export_lora(const ExportConfig& cfg) {
  ExportReport rep;
  rep.kind = "lora";
  VDT_CHECK(cfg.files.size() == 1, "ckpt export: a LoRA is one file; got ", cfg.files.size());
  const auto lora = read_lora(cfg.files.front());
  if (cfg.format == "diffusers") check_diffusers_names(lora, cfg.files.front());
  NamedTensors out;
  Metadata meta = {{"format", "pt"}};
  if (cfg.format == "diffusers") {
    nlohmann::json targets = nlohmann::json::array();
    for (const auto& [module, pair] : lora.modules) {
      const std::string m = wan_to_diffusers(module);
      out.emplace_back("transformer." + m + ".lora_A.weight", pair.a);
      out.emplace_back("transformer." + m + ".lora_B.weight", pair.b);
      targets.push_back(m);
    }
    // diffusers reads the adapter's LoraConfig from this JSON (keys prefixed with the component, as it saves them).
    nlohmann::json md = {
        {"transformer.r", lora.rank}, {"transformer.lora_alpha", lora.alpha}, {"transformer.target_modules", targets}};
    meta["lora_adapter_metadata"] = md.dump();
    rep.written = file_out(cfg, "pytorch_lora_weights.safetensors");
  } else {
    for (const auto& [module, pair] : lora.modules) {
      out.emplace_back("diffusion_model." + module + ".lora_A.weight", pair.a);
      out.emplace_back("diffusion_model." + module + ".lora_B.weight", pair.b);
      out.emplace_back("diffusion_model." + module + ".alpha", torch::tensor(static_cast<float>(lora.alpha)));
    }
    rep.written = file_out(cfg, "lora_comfy.safetensors");
  }
  meta["rank"] = std::to_string(lora.rank);
  meta["alpha"] = std::to_string(lora.alpha);
  rep.tensors = static_cast<int64_t>(out.size());
  save_safetensors(rep.written, out, meta);
  return rep;
}

}  // namespace

ExportReport export_ckpt(const ExportConfig& cfg) {
  cfg.validate();
  const auto files = SafetensorsSet::open(cfg.files);
  return is_lora_file(files) ? export_lora(cfg) : export_dit(cfg, files);
}

}  // namespace vdt
