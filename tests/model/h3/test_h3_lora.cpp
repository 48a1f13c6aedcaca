// A LoRA on the H3 DiT in DiffSynth's saved naming (PEFT on the fused targets: `blocks.N.attn.qkv_proj.lora_A.default
// .weight`, no alpha: alpha = rank, h3_spec §3.2) loads into vdt's attached LoRA, and `merge-lora`'s fold into the
// official key names gives the same forward as the unmerged LoRA.
#include <torch/torch.h>

#include "core/safetensors.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_weights.h"
#include "model/lora.h"
#include "test_util.h"
#include "tools/h3_parity.h"

namespace vdt {
namespace {

TEST(H3Lora, DiffSynthNamedLoraLoadsAndMergesIntoTheCheckpoint) {
  test::TempDir dir;
  const auto files = SafetensorsSet::open({test::fixture("h3_tiny_a.safetensors")});
  const auto cfg = H3Config::from_json(files.metadata().at("config"), "h3_tiny_a");
  const auto in = h3_fixture_inputs(files, torch::kCPU);
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 4, lc.targets = {"qkv_proj", "out_proj", "fc1", "fc2"};

  H3DiT trained(cfg);
  load_h3_weights(*trained, files);
  auto factors = attach_lora(*trained, lc, 3);
  std::vector<std::pair<std::string, torch::Tensor>> peft;  // DiffSynth's file: ".default" keys, float32
  {
    torch::NoGradGuard ng;
    for (auto& [name, t] : factors) {
      if (name.find("lora_B") != std::string::npos) t.normal_(0, 0.02);
      const auto at = name.rfind(".weight");
      peft.emplace_back(name.substr(0, at) + ".default.weight", t.detach().clone());
    }
  }
  torch::NoGradGuard ng;
  const auto expect = trained->forward(in).video_logits;
  const std::string file = dir.file("diffsynth_lora.safetensors");
  save_safetensors(file, peft);

  const auto lora = read_lora(file);
  EXPECT_EQ(lora.rank, 4);
  EXPECT_EQ(lora.alpha, 4);  // no alpha in the file: alpha = rank, as DiffSynth trains
  H3DiT loaded(cfg);
  load_h3_weights(*loaded, files);
  attach_lora(*loaded, lc, 9);
  load_lora(*loaded, lora, file);
  EXPECT_TRUE(torch::equal(loaded->forward(in).video_logits, expect));

  const std::string merged = dir.file("merged.safetensors");
  save_safetensors(merged, merge_lora(files, lora, lora.alpha / static_cast<double>(lora.rank)));
  H3DiT folded(cfg);
  load_h3_weights(*folded, SafetensorsSet::open({merged}));
  const auto got = folded->forward(in).video_logits;
  EXPECT_LT(((got - expect).norm() / expect.norm()).item<double>(), 1e-5);
}

}  // namespace
}  // namespace vdt
