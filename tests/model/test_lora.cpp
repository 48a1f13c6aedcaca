// LoRA files and merging: both namings read to the same modules, bad pairs are named errors, the merge equals the
// unmerged forward (x W^T + s (x A^T) B^T) on every merged Linear, and `vdt ckpt merge-lora` writes it.
#include <torch/torch.h>

#include "core/safetensors.h"
#include "model/lora.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(Lora, TargetsAndNames) {
  const LoraConfig c;
  EXPECT_TRUE(is_lora_target("blocks.3.self_attn.q", c.targets));
  EXPECT_TRUE(is_lora_target("blocks.3.cross_attn.o", c.targets));
  EXPECT_TRUE(is_lora_target("blocks.0.ffn.2", c.targets));
  EXPECT_FALSE(is_lora_target("blocks.0.ffn.1", c.targets));
  EXPECT_FALSE(is_lora_target("blocks.0.self_attn.norm_q", c.targets));
  char w = 0;
  EXPECT_EQ(lora_module_of("blocks.1.self_attn.q.lora_A.weight", &w), "blocks.1.self_attn.q");
  EXPECT_EQ(w, 'A');
  EXPECT_EQ(lora_module_of("base_model.model.blocks.1.self_attn.q.lora_B.default.weight", &w), "blocks.1.self_attn.q");
  EXPECT_EQ(w, 'B');
  EXPECT_EQ(lora_module_of("blocks.1.self_attn.q.weight", &w), "");
}

TEST(Lora, MergeEqualsTheUnmergedForwardAndTheCliWritesIt) {
  test::TempDir d;
  torch::manual_seed(0);
  const auto w = torch::randn({12, 8}), bias = torch::randn({12}), other = torch::randn({3});
  const LoraPair p{torch::randn({4, 8}), torch::randn({12, 4})};
  save_safetensors(d.file("base.safetensors"), {{"blocks.0.self_attn.q.weight", w}, {"blocks.0.self_attn.q.bias", bias},
                                                {"head.norm", other}});
  // PEFT naming, alpha in the metadata.
  save_safetensors(d.file("peft.safetensors"),
                   {{"base_model.model.blocks.0.self_attn.q.lora_A.default.weight", p.a},
                    {"base_model.model.blocks.0.self_attn.q.lora_B.default.weight", p.b}},
                   {{"lora_alpha", "8"}});
  const auto lora = read_lora(d.file("peft.safetensors"));
  EXPECT_EQ(lora.rank, 4);
  EXPECT_EQ(lora.alpha, 8);
  const double scale = lora.alpha / lora.rank;
  const auto merged = merge_lora(SafetensorsSet::open({d.file("base.safetensors")}), lora, scale);
  torch::Tensor wm;
  for (const auto& [k, t] : merged)
    if (k == "blocks.0.self_attn.q.weight") wm = t;
  const auto x = torch::randn({5, 8});
  const auto want = lora_linear(x, w, bias, p, scale);
  EXPECT_TRUE(torch::allclose(torch::nn::functional::linear(x, wm, bias), want, 1e-5, 1e-5));

  const auto r = test::run_vdt("ckpt merge-lora --base " + d.file("base.safetensors") + " --lora " +
                               d.file("peft.safetensors") + " --out " + d.file("merged.safetensors"));
  ASSERT_EQ(r.code, 0) << r.output;
  auto f = SafetensorsFile::open(d.file("merged.safetensors"));
  EXPECT_TRUE(torch::allclose(torch::nn::functional::linear(x, f->get("blocks.0.self_attn.q.weight"), bias), want,
                              1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(f->get("head.norm"), other));
  EXPECT_EQ(f->metadata().at("lora_rank"), "4");

  // Bad inputs: a lone factor, and a LoRA that does not fit the base.
  save_safetensors(d.file("lone.safetensors"), {{"blocks.0.self_attn.q.lora_A.weight", p.a}});
  test::expect_error([&] { read_lora(d.file("lone.safetensors")); }, {"lone.safetensors", "blocks.0.self_attn.q", "only lora_A"});
  save_safetensors(d.file("wide.safetensors"), {{"blocks.0.self_attn.q.lora_A.weight", torch::randn({4, 9})},
                                                {"blocks.0.self_attn.q.lora_B.weight", p.b}});
  test::expect_error([&] { merge_lora(SafetensorsSet::open({d.file("base.safetensors")}), read_lora(d.file("wide.safetensors")), 1); },
                     {"blocks.0.self_attn.q.weight", "[12, 9]"});
}

TEST(CkptCli, InspectCheckAndDiffATinyExport) {
  test::TempDir d;
  // A tiny-preset checkpoint from the parity fixture's weights is not at hand here; build one from the model.
  const auto r1 = test::run_vdt("ckpt inspect " + test::fixture("wan_tiny_a.safetensors"));
  ASSERT_EQ(r1.code, 0) << r1.output;
  EXPECT_NE(r1.output.find("tensors"), std::string::npos);
  const auto r2 = test::run_vdt("ckpt diff " + test::fixture("wan_tiny_a.safetensors") + " " +
                                test::fixture("wan_tiny_a.safetensors"));
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(r2.output.find("0 differ in presence or shape, worst relative L2 0.000e+00"), std::string::npos) << r2.output;
  // A checkpoint with a NaN and a missing key fails the check, naming both.
  save_safetensors(d.file("bad.safetensors"), {{"patch_embedding.weight", torch::full({2, 2}, NAN)}});
  const auto r3 = test::run_vdt("ckpt check " + d.file("bad.safetensors") + " --model tiny");
  EXPECT_EQ(r3.code, 1) << r3.output;
  EXPECT_NE(r3.output.find("non-finite"), std::string::npos) << r3.output;
  EXPECT_NE(r3.output.find("head.head.weight: missing (preset tiny)"), std::string::npos) << r3.output;
}

}  // namespace
}  // namespace vdt
