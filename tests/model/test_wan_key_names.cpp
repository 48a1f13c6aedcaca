// Wan weights in the layouts users have: diffusers' WanTransformer3DModel names and the ComfyUI / DiffSynth prefixes
// load into the same model as our names, the name table maps every tiny-model parameter both ways, and a file that
// matches no layout gets an error that names the layouts vdt reads.
#include <torch/torch.h>

#include "core/safetensors.h"
#include "model/config.h"
#include "model/wan_dit.h"
#include "model/wan_key_names.h"
#include "model/weights_io.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(WanKeyNames, EveryParameterMapsBothWays) {
  WanDiT model(preset_config("tiny"));
  int64_t renamed = 0;
  for (const auto& kv : model->named_parameters()) {
    const std::string ours = kv.key(), theirs = wan_to_diffusers(ours);
    if (ours.rfind("patch_embedding.", 0) == 0) {
      EXPECT_EQ(theirs, ours);
      continue;
    }
    EXPECT_NE(theirs, ours) << "no diffusers name for " << ours;
    EXPECT_EQ(wan_from_diffusers(theirs), ours) << theirs;
    EXPECT_EQ(wan_canonical_key(theirs, true), ours);
    ++renamed;
  }
  EXPECT_GT(renamed, 20);
  EXPECT_EQ(wan_to_diffusers("blocks.3.self_attn.o.weight"), "blocks.3.attn1.to_out.0.weight");
  EXPECT_EQ(wan_to_diffusers("blocks.0.ffn.0"), "blocks.0.ffn.net.0.proj");  // a LoRA module path
  EXPECT_EQ(wan_to_diffusers("blocks.0.modulation"), "blocks.0.scale_shift_table");
  EXPECT_EQ(wan_to_diffusers("head.modulation"), "scale_shift_table");
  EXPECT_EQ(wan_to_diffusers("gc_sem_cond.patch.weight"), "gc_sem_cond.patch.weight");
  EXPECT_EQ(wan_canonical_key("model.diffusion_model.blocks.0.norm3.weight", false), "blocks.0.norm3.weight");
  // Outside a diffusers file, names are left alone (MiniMax-H3 has its own blocks.N.norm2).
  EXPECT_EQ(wan_canonical_key("blocks.0.norm2.weight", false), "blocks.0.norm2.weight");
}

TEST(WanKeyNames, DiffusersComfyAndDiffSynthLayoutsLoadLikeOurs) {
  test::TempDir d;
  const ModelConfig mc = preset_config("tiny");
  WanDiT src(mc);
  src->init_weights(1);
  NamedTensors diffusers, comfy, diffsynth;
  for (const auto& [k, t] : export_weights(*src, torch::kFloat32)) {
    diffusers.emplace_back(wan_to_diffusers(k), t);
    comfy.emplace_back("model.diffusion_model." + k, t);
    diffsynth.emplace_back("model." + k, t);
  }
  save_safetensors(d.file("diffusers.safetensors"), diffusers);
  save_safetensors(d.file("comfy.safetensors"), comfy);
  save_safetensors(d.file("diffsynth.safetensors"), diffsynth);
  for (const char* f : {"diffusers.safetensors", "comfy.safetensors", "diffsynth.safetensors"}) {
    const auto files = SafetensorsSet::open({d.file(f)});
    EXPECT_TRUE(detect_config(files).same_architecture(mc)) << f;
    WanDiT dst(mc);
    dst->init_weights(2);
    load_weights(*dst, files);
    const auto want = src->named_parameters();
    for (const auto& kv : dst->named_parameters())
      EXPECT_TRUE(torch::equal(kv.value(), want[kv.key()])) << f << ": " << kv.key();
  }
}

TEST(WanKeyNames, MismatchErrorNamesTheLayoutsRead) {
  test::TempDir d;
  save_safetensors(d.file("other.safetensors"), {{"encoder.conv_in.weight", torch::zeros({4, 3})}});
  WanDiT dst(preset_config("tiny"));
  test::expect_error([&] { load_weights(*dst, SafetensorsSet::open({d.file("other.safetensors")})); },
                     {"other.safetensors", "missing", "unexpected", "encoder.conv_in.weight", "WanTransformer3DModel",
                      "model.diffusion_model."});
}

}  // namespace
}  // namespace vdt
