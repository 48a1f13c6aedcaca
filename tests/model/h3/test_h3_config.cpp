#include <torch/torch.h>

#include <algorithm>

#include "core/safetensors.h"
#include "model/h3/h3_config.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_weights.h"
#include "test_util.h"

namespace vdt {
namespace {

std::string h3_fixture() { return test::fixture("h3_tiny_a.safetensors"); }

std::map<std::string, std::vector<int64_t>> module_shapes(const torch::nn::Module& m) {
  std::map<std::string, std::vector<int64_t>> s;
  for (const auto& kv : m.named_parameters()) s[kv.key()] = kv.value().sizes().vec();
  for (const auto& kv : m.named_buffers()) s[kv.key()] = kv.value().sizes().vec();
  return s;
}

TEST(H3Config, PresetsValidateAndUnknownNamesAreListed) {
  for (const auto& n : h3_preset_names()) EXPECT_NO_THROW(h3_preset(n).validate()) << n;
  test::expect_error([] { h3_preset("h4"); }, {"--model", "h4", "minimax-h3", "h3-tiny"});
  auto bad = h3_preset("h3-tiny");
  bad.rope_len = 8;  // 48 rotated channels > head_dim 40
  test::expect_error([&] { bad.validate(); }, {"rope_len", "head_dim 40"});
}

// The fixture's constructor arguments are the h3-tiny preset, and to_json writes the same spelling back.
TEST(H3Config, FixtureJsonIsTheTinyPresetAndRoundTrips) {
  auto files = SafetensorsSet::open({h3_fixture()});
  const auto c = H3Config::from_json(files.metadata().at("config"), "fixture");
  EXPECT_TRUE(c.same_architecture(h3_preset("h3-tiny")));
  EXPECT_EQ(c.inner(), 80);
  EXPECT_EQ(c.adaln_out(), 1152);
  EXPECT_EQ(c.final_adaln_out(), 128);
  const auto back = H3Config::from_json(c.to_json(), "round trip");
  EXPECT_TRUE(back.same_architecture(c));
  EXPECT_EQ(back.qk_norm_eps, c.qk_norm_eps);
  // Missing keys take DiffSynth's defaults: an empty object is the released model.
  EXPECT_TRUE(H3Config::from_json("{}", "empty").same_architecture(h3_preset("minimax-h3")));
  test::expect_error([] { H3Config::from_json(R"({"hidden_size": 64, "adaln_out_features": 1000})", "x.json"); },
                     {"x.json", "adaln_out_features 1000", "1152"});
  test::expect_error([] { H3Config::from_json("{not json", "y.json"); }, {"y.json", "not valid JSON"});
}

// docs/h3_model.md §1.2: 535 tensors, 33,122,992,912 parameters, 13,010,457,600 of them in the 50 blocks' AdaLN
// linears. Counted from the config: building the model would take 132 GB.
TEST(H3Config, ReleasedModelHas535TensorsAnd33BParameters) {
  const auto shapes = h3_checkpoint_shapes(h3_preset("minimax-h3"));
  int64_t params = 0, adaln = 0, top = 0, refiner = 0, blocks = 0, final_layer = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    params += n;
    if (name.rfind("blocks.", 0) == 0) {
      ++blocks;
      if (name.find(".adaln_proj.") != std::string::npos) adaln += n;
    } else if (name.rfind("token_refiner.", 0) == 0) {
      ++refiner;
    } else if (name.rfind("final_layer.", 0) == 0) {
      ++final_layer;
    } else {
      ++top;
    }
  }
  EXPECT_EQ(shapes.size(), 535u);
  EXPECT_EQ(top, 11);
  EXPECT_EQ(refiner, 17);
  EXPECT_EQ(blocks, 500);
  EXPECT_EQ(final_layer, 7);
  EXPECT_EQ(params, 33'122'992'912);
  EXPECT_EQ(adaln, 13'010'457'600);
  EXPECT_EQ(shapes.at("blocks.49.attn.qkv_proj.weight"), (std::vector<int64_t>{21504, 5376}));
  EXPECT_EQ(shapes.at("blocks.0.adaln_proj.linear.weight"), (std::vector<int64_t>{96768, 2688}));
  EXPECT_EQ(shapes.at("final_layer.adaln_proj.linear.weight"), (std::vector<int64_t>{10752, 2688}));
  EXPECT_EQ(shapes.at("token_refiner.blocks.1.mlp.fc1.weight"), (std::vector<int64_t>{28672, 5376}));
}

// The module registers exactly the tensors the config lists (so the 535 count above is the module's), under the
// checkpoint names: checked on small configs with different layer counts.
TEST(H3Config, ModuleTensorsAreTheCheckpointList) {
  auto c = h3_preset("h3-tiny");
  for (auto [layers, refiners] : std::vector<std::pair<int64_t, int64_t>>{{2, 1}, {3, 2}, {1, 0}}) {
    c.num_layers = layers, c.refiner_layers = refiners;
    H3DiT m(c);
    EXPECT_EQ(module_shapes(*m), h3_checkpoint_shapes(c)) << layers << " layers, " << refiners << " refiner blocks";
    EXPECT_EQ(m->blocks->size(), static_cast<size_t>(layers));
  }
  EXPECT_EQ(module_shapes(*H3DiT(h3_preset("h3-tiny"))).size(), 47u);
}

TEST(H3Config, DetectedFromTheFixtureAndFromAnExport) {
  auto fx = SafetensorsSet::open({h3_fixture()});
  const auto c = detect_h3_config(fx);
  EXPECT_EQ(c.preset, "h3-tiny");
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.head_dim, 40);
  EXPECT_EQ(c.refiner_layers, 1);
  test::TempDir dir;
  auto custom = h3_preset("h3-tiny");
  custom.num_layers = 3, custom.heads = 4, custom.ffn = 72;
  H3DiT m(custom);
  save_safetensors(dir.file("w.safetensors"), export_h3_weights(*m));
  const auto d = detect_h3_config(SafetensorsSet::open({dir.file("w.safetensors")}));
  EXPECT_EQ(d.preset, "custom");
  EXPECT_TRUE(d.same_architecture(custom));
  test::expect_error(
      [] {
        detect_h3_config({{"patch_embedding.weight", {1, 2, 3, 4, 5}}}, "wan.safetensors");
      },
      {"wan.safetensors", "not an H3 DiT", "video_patch_proj.weight"});
}

// Strict loading: every key of the fixture is used, and a bad file is refused with the list of what is wrong.
TEST(H3Weights, StrictLoadAndBadCheckpointsAreRefusedWithTheList) {
  auto fx = SafetensorsSet::open({h3_fixture()});
  H3DiT m(h3_preset("h3-tiny"));
  const auto report = load_h3_weights(*m, fx);
  EXPECT_EQ(report.loaded.size(), 47u);
  EXPECT_TRUE(torch::equal(m->blocks[1]->as<H3BlockImpl>()->mlp->fc2->weight, fx.get("blocks.1.mlp.fc2.weight")));
  EXPECT_TRUE(torch::equal(m->rope->inv_freq, fx.get("rope.inv_freq")));  // loaded (and never read)

  NamedTensors good;
  for (const auto& k : fx.keys())
    if (k.rfind("fixture.", 0) != 0) good.emplace_back(k, fx.get(k));
  test::TempDir dir;
  auto write = [&](const std::string& name, NamedTensors t) {
    save_safetensors(dir.file(name), t);
    return SafetensorsSet::open({dir.file(name)});
  };
  auto missing = good;
  missing.erase(std::remove_if(missing.begin(), missing.end(),
                               [](const auto& kv) { return kv.first == "blocks.0.attn.k_norm.weight"; }),
                missing.end());
  auto extra = good;
  extra.emplace_back("blocks.2.norm1.weight", torch::ones({64}));
  auto wrong = good;
  for (auto& kv : wrong)
    if (kv.first == "blocks.1.attn.qkv_proj.weight") kv.second = torch::zeros({192, 64});
  for (auto& [file, parts] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"missing", {"missing.safetensors", "1 missing key", "blocks.0.attn.k_norm.weight"}},
           {"extra", {"extra.safetensors", "1 unexpected key", "blocks.2.norm1.weight"}},
           {"wrong",
            {"wrong.safetensors", "1 shape mismatch", "blocks.1.attn.qkv_proj.weight", "[192, 64]", "[240, 64]"}}}) {
    auto set = write(file + ".safetensors", file == "missing" ? missing : file == "extra" ? extra : wrong);
    H3DiT fresh(h3_preset("h3-tiny"));
    try {
      load_h3_weights(*fresh, set);
      ADD_FAILURE() << file << ": loaded";
    } catch (const std::exception& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
    // The check alone (before any model exists) gives the same verdict.
    EXPECT_THROW(check_h3_weights(set, h3_preset("h3-tiny")), std::exception) << file;
  }
  EXPECT_NO_THROW(check_h3_weights(write("good.safetensors", good), h3_preset("h3-tiny")));
}

// Release precision: bf16 everywhere except the fp32 islands; export keeps those dtypes and a reload is exact.
TEST(H3Weights, ReleasePrecisionKeepsFp32IslandsThroughExportAndLoad) {
  H3DiT m(h3_preset("h3-tiny"));
  m->to_release_precision();
  const auto exported = export_h3_weights(*m);
  ASSERT_EQ(exported.size(), 47u);
  int islands = 0;
  for (const auto& [name, t] : exported) {
    const bool island = H3DiTImpl::is_fp32_island(name);
    islands += island;
    EXPECT_EQ(t.scalar_type(), island ? torch::kFloat32 : torch::kBFloat16) << name;
  }
  EXPECT_EQ(islands, 13);  // patch projections 2 x 2, time MLP 4, rope.inv_freq, output heads 2 x 2
  EXPECT_EQ(m->compute_dtype(), torch::kBFloat16);
  test::TempDir dir;
  save_safetensors(dir.file("r.safetensors"), exported);
  H3DiT back(h3_preset("h3-tiny"), H3BuildOptions{torch::kCPU, torch::kBFloat16, true});
  load_h3_weights(*back, SafetensorsSet::open({dir.file("r.safetensors")}));
  for (const auto& [name, t] : export_h3_weights(*back)) {
    const auto it = std::find_if(exported.begin(), exported.end(), [&](const auto& kv) { return kv.first == name; });
    ASSERT_NE(it, exported.end()) << name;
    EXPECT_EQ(t.scalar_type(), it->second.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(t, it->second)) << name;
  }
  // An explicit export dtype gives the release layout from a float32 model.
  H3DiT f32(h3_preset("h3-tiny"));
  for (const auto& [name, t] : export_h3_weights(*f32, torch::kBFloat16))
    EXPECT_EQ(t.scalar_type(), H3DiTImpl::is_fp32_island(name) ? torch::kFloat32 : torch::kBFloat16) << name;
}

}  // namespace
}  // namespace vdt
