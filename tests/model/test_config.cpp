#include <torch/torch.h>

#include "core/safetensors.h"
#include "model/config.h"
#include "model/wan_dit.h"
#include "model/weights_io.h"
#include "test_util.h"

namespace vdt {
namespace {

int64_t count_params(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(Presets, AllValidateAndUnknownNamesAreListed) {
  for (const auto& n : preset_names()) EXPECT_NO_THROW(preset_config(n).validate()) << n;
  test::expect_error([] { preset_config("wan3"); }, {"--model", "wan3", "wan2.2-ti2v-5b", "tiny"});
  auto bad = preset_config("tiny");
  bad.num_heads = 5;
  test::expect_error([&] { bad.validate(); }, {"dim", "num_heads"});
}

// The 5B preset has 825 tensors and 4,999,787,712 parameters (docs/design.md §1). Building all 30 layers would take
// 20 GB of host memory, so count the top level with one layer and one block separately.
TEST(Presets, Ti2v5bHas825TensorsAnd4999787712Parameters) {
  auto cfg = preset_config("wan2.2-ti2v-5b");
  cfg.num_layers = 1;
  WanDiT one(cfg, torch::TensorOptions().dtype(torch::kBFloat16));
  const auto& block = *one->blocks[0];
  const int64_t block_params = count_params(block), block_tensors = block.parameters().size();
  EXPECT_EQ(block_tensors, 27);
  EXPECT_EQ(block_params, 163'656'704);
  const int64_t top_params = count_params(*one) - block_params;
  const int64_t top_tensors = static_cast<int64_t>(one->parameters().size()) - block_tensors;
  EXPECT_EQ(top_tensors, 15);
  EXPECT_EQ(top_tensors + 30 * block_tensors, 825);
  EXPECT_EQ(top_params + 30 * block_params, 4'999'787'712);
}

TEST(Presets, DetectedFromExportedWeights) {
  test::TempDir dir;
  for (const std::string name : {"tiny"}) {
    WanDiT m(preset_config(name));
    save_safetensors(dir.file("w.safetensors"), export_weights(*m, torch::kBFloat16));
    auto files = SafetensorsSet::open({dir.file("w.safetensors")});
    const auto c = detect_config(files);
    EXPECT_EQ(c.preset, name);
    EXPECT_TRUE(c.same_architecture(preset_config(name)));
  }
  // The fixture's architecture is no preset: detected as custom with the right shapes.
  auto fx = SafetensorsSet::open({test::fixture("wan_tiny_a.safetensors")});
  const auto c = detect_config(fx);
  EXPECT_EQ(c.preset, "custom");
  EXPECT_EQ(c.dim, 96);
  EXPECT_EQ(c.ffn_dim, 256);
  EXPECT_EQ(c.in_dim, 8);
  EXPECT_EQ(c.out_dim, 8);
  EXPECT_EQ(c.text_dim, 32);
  EXPECT_EQ(c.num_layers, 2);
}

TEST(Weights, StrictLoadListsMissingUnexpectedAndMismatchedKeys) {
  test::TempDir dir;
  WanDiT m(preset_config("tiny"));
  auto w = export_weights(*m, torch::kFloat32);
  auto drop = w;
  drop.erase(std::remove_if(drop.begin(), drop.end(), [](auto& kv) { return kv.first == "blocks.1.ffn.2.bias"; }),
             drop.end());
  drop.emplace_back("blocks.7.extra.weight", torch::ones({2}));
  for (auto& kv : drop)
    if (kv.first == "head.modulation") kv.second = torch::zeros({1, 3, 128});
  save_safetensors(dir.file("bad.safetensors"), drop);
  WanDiT target(preset_config("tiny"));
  test::expect_error([&] { load_weights(*target, SafetensorsSet::open({dir.file("bad.safetensors")})); },
                     {"bad.safetensors", "1 missing key(s)", "blocks.1.ffn.2.bias", "1 unexpected key(s)",
                      "blocks.7.extra.weight", "head.modulation", "[1, 3, 128]"});
}

TEST(Weights, ExportThenLoadRoundTripsAcrossShards) {
  test::TempDir dir;
  WanDiT a(preset_config("tiny")), b(preset_config("tiny"));
  a->init_weights(3);
  auto w = export_weights(*a, torch::kFloat32);
  const size_t half = w.size() / 2;
  save_safetensors(dir.file("s1.safetensors"), {w.begin(), w.begin() + half});
  save_safetensors(dir.file("s2.safetensors"), {w.begin() + half, w.end()});
  const auto report = load_weights(*b, SafetensorsSet::open({dir.file("s1.safetensors"), dir.file("s2.safetensors")}));
  EXPECT_EQ(report.loaded.size(), w.size());
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& kv : pa) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << kv.key();
}

}  // namespace
}  // namespace vdt
