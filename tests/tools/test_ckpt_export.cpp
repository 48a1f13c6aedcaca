// `vdt ckpt export`: an SFT export with the adapter needs --drop-adapter (the error says so); the diffusers directory
// holds config.json and diffusers' names and loads back into the same model; the comfy file carries the
// "model.diffusion_model." prefix; LoRA files carry alpha where diffusers (lora_adapter_metadata) and ComfyUI
// (<module>.alpha) read it. The diffusers side itself is tested in python/tests/test_export.py.
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/wan_dit.h"
#include "model/weights_io.h"
#include "test_util.h"
#include "tools/ckpt_export.h"

namespace vdt {
namespace {

// A tiny DiT checkpoint as `vdt train sft` exports it: the DiT plus six gc_sem_cond tensors.
std::string write_sft_export(const test::TempDir& d, WanDiT& model) {
  model->init_weights(3);
  auto tensors = export_weights(*model, torch::kBFloat16);
  for (const char* k : {"gc_sem_cond.patch.weight", "gc_sem_cond.patch.bias", "gc_sem_cond.embed.weight",
                        "gc_sem_cond.proj_in.weight", "gc_sem_cond.proj_out.weight", "gc_sem_cond.proj_out.bias"})
    tensors.emplace_back(k, torch::zeros({2, 2}, torch::kBFloat16));
  const std::string path = d.file("step-4.safetensors");
  save_safetensors(path, tensors, {{"vocab", "parts"}, {"step", "4"}});
  return path;
}

TEST(CkptExport, AdapterNeedsDropAdapter) {
  test::TempDir d;
  WanDiT model(preset_config("tiny"));
  const auto path = write_sft_export(d, model);
  for (const char* fmt : {"diffusers", "comfy"}) {
    ExportConfig c{{path}, fmt, d.file(std::string("out_") + fmt), false};
    test::expect_error([&] { export_ckpt(c); }, {path, "gc_sem_cond", "--drop-adapter"});
  }
  test::expect_error([&] { export_ckpt({{path}, "onnx", d.file("x"), true}); }, {"--format", "diffusers or comfy"});
}

TEST(CkptExport, DiffusersDirectoryAndComfyFileLoadBack) {
  test::TempDir d;
  const ModelConfig mc = preset_config("tiny");
  WanDiT model(mc);
  const auto path = write_sft_export(d, model);
  const auto r = export_ckpt({{path}, "diffusers", d.file("diffusers"), true});
  EXPECT_EQ(r.kind, "dit");
  EXPECT_EQ(r.dropped, 6);
  const auto j = nlohmann::json::parse(std::ifstream(d.file("diffusers/config.json")));
  EXPECT_EQ(j["_class_name"], "WanTransformer3DModel");
  EXPECT_EQ(j["num_attention_heads"], mc.num_heads);
  EXPECT_EQ(j["num_attention_heads"], 4);  // the tiny preset's, found from the shapes
  EXPECT_EQ(j["attention_head_dim"], mc.dim / mc.num_heads);
  EXPECT_EQ(j["in_channels"], mc.in_dim);
  EXPECT_EQ(j["text_dim"], mc.text_dim);
  EXPECT_EQ(j["num_layers"], mc.num_layers);
  EXPECT_EQ(j["ffn_dim"], mc.ffn_dim);
  const auto files = SafetensorsSet::open({d.file("diffusers/diffusion_pytorch_model.safetensors")});
  EXPECT_TRUE(files.contains("condition_embedder.time_proj.weight"));
  EXPECT_TRUE(files.contains("blocks.1.attn2.to_out.0.bias"));
  EXPECT_FALSE(files.contains("head.head.weight"));
  EXPECT_EQ(files.metadata().at("vdt.vocab"), "parts");

  const auto rc = export_ckpt({{path}, "comfy", d.file("comfy.safetensors"), true});
  const auto comfy = SafetensorsSet::open({rc.written});
  for (const auto& k : comfy.keys()) EXPECT_EQ(k.rfind("model.diffusion_model.", 0), 0u) << k;
  EXPECT_TRUE(comfy.contains("model.diffusion_model.blocks.0.self_attn.q.weight"));

  // Both load back into the model they came from (bf16 as exported).
  for (const auto* set : {&files, &comfy}) {
    WanDiT back(mc);
    load_weights(*back, *set);
    const auto want = model->named_parameters();
    for (const auto& kv : back->named_parameters())
      EXPECT_TRUE(torch::equal(kv.value(), want[kv.key()].to(torch::kBFloat16).to(torch::kFloat32))) << kv.key();
  }
  // A diffusers export exports again (its names are read) to the same comfy tensors.
  const auto again = export_ckpt({{files.files().front()->path()}, "comfy", d.file("again.safetensors"), false});
  const auto a2 = SafetensorsSet::open({again.written});
  EXPECT_EQ(a2.keys(), comfy.keys());
}

TEST(CkptExport, CustomWidthsNeedTheHeadCount) {
  test::TempDir d;
  ModelConfig mc = preset_config("tiny");
  mc.dim = 96, mc.num_heads = 4;  // no preset has these widths; 96 is not a multiple of Wan's head dim 128
  WanDiT model(mc);
  save_safetensors(d.file("custom.safetensors"), export_weights(*model, torch::kFloat32));
  test::expect_error(
      [&] {
        export_ckpt({{d.file("custom.safetensors")}, "diffusers", d.file("o"), false});
      },
      {"custom.safetensors", "head count", "--num-heads"});
  ExportConfig c{{d.file("custom.safetensors")}, "diffusers", d.file("o"), false, 4};
  export_ckpt(c);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(d.file("o/config.json")))["attention_head_dim"], 24);
  // With the config in the metadata (as parity fixtures carry it) no flag is needed.
  save_safetensors(d.file("meta.safetensors"), export_weights(*model, torch::kFloat32), {{"config", mc.to_json()}});
  export_ckpt({{d.file("meta.safetensors")}, "diffusers", d.file("m"), false});
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(d.file("m/config.json")))["num_attention_heads"], 4);
  // A diffusers directory exports again: the head count comes from its config.json. ComfyUI needs none.
  export_ckpt({{d.file("o/diffusion_pytorch_model.safetensors")}, "diffusers", d.file("o2"), false});
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(d.file("o2/config.json")))["num_attention_heads"], 4);
  export_ckpt({{d.file("custom.safetensors")}, "comfy", d.file("c.safetensors"), false});
}

TEST(CkptExport, LoraAlphaWhereDiffusersAndComfyReadIt) {
  test::TempDir d;
  torch::manual_seed(0);
  const auto a = torch::randn({4, 128}), b = torch::randn({128, 4}), a2 = torch::randn({4, 128}),
             b2 = torch::randn({384, 4});
  save_safetensors(d.file("lora.safetensors"),
                   {{"blocks.0.self_attn.q.lora_A.weight", a},
                    {"blocks.0.self_attn.q.lora_B.weight", b},
                    {"blocks.1.ffn.0.lora_A.weight", a2},
                    {"blocks.1.ffn.0.lora_B.weight", b2}},
                   {{"rank", "4"}, {"alpha", "8"}});
  const auto rd = export_ckpt({{d.file("lora.safetensors")}, "diffusers", d.file("lora_diffusers.safetensors"), false});
  EXPECT_EQ(rd.kind, "lora");
  const auto f = SafetensorsFile::open(rd.written);
  EXPECT_TRUE(torch::equal(f->get("transformer.blocks.0.attn1.to_q.lora_A.weight"), a));
  EXPECT_TRUE(torch::equal(f->get("transformer.blocks.1.ffn.net.0.proj.lora_B.weight"), b2));
  const auto md = nlohmann::json::parse(f->metadata().at("lora_adapter_metadata"));
  EXPECT_EQ(md["transformer.r"], 4);
  EXPECT_EQ(md["transformer.lora_alpha"], 8.0);

  const auto rc = export_ckpt({{d.file("lora.safetensors")}, "comfy", d.file("lora_comfy.safetensors"), false});
  const auto c = SafetensorsFile::open(rc.written);
  EXPECT_EQ(c->get("diffusion_model.blocks.1.ffn.0.alpha").item<float>(), 8.0f);
  EXPECT_TRUE(torch::equal(c->get("diffusion_model.blocks.0.self_attn.q.lora_B.weight"), b));
  const auto back = read_lora(rc.written);  // vdt reads its comfy export back
  EXPECT_EQ(back.modules.size(), 2u);
  EXPECT_EQ(back.alpha, 8.0);
}

// diffusers' LoRA names exist for Wan modules only: an H3 LoRA (vdt's fused names, with or without the trainer's
// base=cwm metadata, or diffusers' split names) is refused naming the format and what to use instead, not written
// under names no loader knows. ComfyUI's layout (vdt's names) still exports.
TEST(CkptExport, AnH3LoraIsRefusedForDiffusers) {
  test::TempDir d;
  const auto a = torch::randn({4, 64}), b = torch::randn({192, 4});
  const NamedTensors fused = {{"blocks.0.attn.qkv_proj.lora_A.weight", a}, {"blocks.0.attn.qkv_proj.lora_B.weight", b}};
  save_safetensors(d.file("h3.safetensors"), fused, {{"base", "cwm"}, {"alpha", "4"}});
  save_safetensors(d.file("h3_nometa.safetensors"), fused, {});
  save_safetensors(d.file("h3_split.safetensors"),
                   {{"transformer_blocks.0.attn.to_q.lora_A.weight", a},
                    {"transformer_blocks.0.attn.to_q.lora_B.weight", torch::randn({64, 4})}},
                   {});
  for (const char* f : {"h3.safetensors", "h3_nometa.safetensors", "h3_split.safetensors"})
    test::expect_error(
        [&] {
          export_ckpt({{d.file(f)}, "diffusers", d.file("out.safetensors"), false});
        },
        {d.file(f), "--format diffusers", "H3", "merge-lora"});
  EXPECT_FALSE(std::filesystem::exists(d.file("out.safetensors")));
  // A module that has no diffusers name at all is refused the same way.
  save_safetensors(d.file("odd.safetensors"), {{"blocks.0.odd.lora_A.weight", a}, {"blocks.0.odd.lora_B.weight", b}},
                   {});
  test::expect_error(
      [&] {
        export_ckpt({{d.file("odd.safetensors")}, "diffusers", d.file("out.safetensors"), false});
      },
      {"odd.safetensors", "'blocks.0.odd'", "--format comfy"});
  const auto rc = export_ckpt({{d.file("h3.safetensors")}, "comfy", d.file("c.safetensors"), false});
  EXPECT_TRUE(
      torch::equal(SafetensorsFile::open(rc.written)->get("diffusion_model.blocks.0.attn.qkv_proj.lora_A.weight"), a));
}

}  // namespace
}  // namespace vdt
