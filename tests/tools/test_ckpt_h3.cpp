// `vdt ckpt inspect/check` know MiniMax-H3 checkpoints: the family and preset are detected from the shapes, a healthy
// file passes, and a missing key, an extra key or a wrong shape is reported by name.
#include <torch/torch.h>

#include "core/safetensors.h"
#include "test_util.h"
#include "tools/ckpt.h"

namespace vdt {
namespace {

NamedTensors h3_tensors() {
  auto f = SafetensorsFile::open(test::fixture("h3_tiny_a.safetensors"));
  NamedTensors out;
  for (const auto& k : f->keys())
    if (k.rfind("fixture.", 0) != 0) out.emplace_back(k, f->get(k).clone());
  return out;
}

TEST(CkptH3, DetectedAndChecked) {
  test::TempDir d;
  auto t = h3_tensors();
  ASSERT_EQ(t.size(), 47u);
  save_safetensors(d.file("ok.safetensors"), t, {});
  const auto files = SafetensorsSet::open({d.file("ok.safetensors")});
  const auto s = inspect_ckpt(files);
  EXPECT_EQ(s.family, "minimax-h3");
  EXPECT_EQ(s.preset, "h3-tiny");
  EXPECT_TRUE(check_ckpt(files).empty());
  EXPECT_TRUE(check_ckpt(files, "h3-tiny").empty());
  // Missing, extra and misshapen keys, each named.
  NamedTensors bad;
  for (auto& [k, v] : t) {
    if (k == "blocks.1.mlp.fc2.weight") continue;
    bad.emplace_back(k, k == "final_layer.video_out.bias" ? torch::zeros({7}) : v);
  }
  bad.emplace_back("blocks.9.extra.weight", torch::zeros({2}));
  save_safetensors(d.file("bad.safetensors"), bad, {});
  const auto problems = check_ckpt(SafetensorsSet::open({d.file("bad.safetensors")}), "h3-tiny");
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_NE(all.find("blocks.1.mlp.fc2.weight: missing"), std::string::npos) << all;
  EXPECT_NE(all.find("final_layer.video_out.bias: shape mismatch"), std::string::npos) << all;
  EXPECT_NE(all.find("blocks.9.extra.weight: unexpected"), std::string::npos) << all;
  auto r = test::run_vdt("ckpt inspect " + d.file("ok.safetensors"));
  EXPECT_NE(r.output.find("h3-tiny (minimax-h3)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vdt
