// A LoRA on the H3 DiT in DiffSynth's saved naming (PEFT on the fused targets: `blocks.N.attn.qkv_proj.lora_A.default
// .weight`, no alpha: alpha = rank, docs/h3_model.md §3.2) loads into vdt's attached LoRA, and `merge-lora`'s fold into
// the official key names gives the same forward as the unmerged LoRA; so does diffusers' split q/k/v naming, fused.
#include <torch/torch.h>

#include "core/safetensors.h"
#include "model/denoiser_registry.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_lora.h"
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

// A LoRA in diffusers' split naming (to_q/to_k/to_v, to_out.0, ff.net.0.proj with rows [up; gate], ff.net.2, under
// `transformer.`; docs/h3_model.md §1.9) folds into the checkpoint's fused keys as the index conventions say — q/k/v
// rows interleaved per head, the MLP's halves swapped — and loaded into the model (rank 3r) gives the folded forward.
TEST(H3Lora, SplitQkvNamingFusesIntoTheCheckpointLayout) {
  test::TempDir dir;
  const auto files = SafetensorsSet::open({test::fixture("h3_tiny_a.safetensors")});
  const auto cfg = H3Config::from_json(files.metadata().at("config"), "h3_tiny_a");
  const int64_t r = 2, H = cfg.heads, Dh = cfg.head_dim, D = cfg.hidden, F = cfg.ffn;
  torch::manual_seed(11);
  NamedTensors file;
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> split;  // module -> (A, B)
  auto add = [&](const std::string& m, int64_t in, int64_t out) {
    auto a = torch::randn({r, in}) * 0.1, b = torch::randn({out, r}) * 0.1;
    split[m] = {a, b};
    file.emplace_back("transformer." + m + ".lora_A.weight", a);
    file.emplace_back("transformer." + m + ".lora_B.weight", b);
  };
  std::vector<std::pair<std::string, std::string>> blocks;  // (ours, diffusers')
  for (int64_t b = 0; b < cfg.num_layers; ++b)
    blocks.emplace_back("blocks." + std::to_string(b), "transformer_blocks." + std::to_string(b));
  for (int64_t b = 0; b < cfg.refiner_layers; ++b)
    blocks.emplace_back("token_refiner.blocks." + std::to_string(b),
                        "token_refiner.refiner_blocks." + std::to_string(b));
  for (const auto& [ours, blk] : blocks) {
    for (const char* p : {"to_q", "to_k", "to_v"}) add(blk + ".attn." + p, D, H * Dh);
    add(blk + ".attn.to_out.0", H * Dh, D);
    add(blk + ".ff.net.0.proj", D, 2 * F);
    add(blk + ".ff.net.2", F, D);
  }
  const std::string path = dir.file("split_lora.safetensors");
  save_safetensors(path, file, {{"alpha", "4"}});  // scale alpha / r = 2
  const auto raw = read_lora(path);
  ASSERT_TRUE(h3_lora_is_split(raw));
  const auto lora = h3_lora_for_base(raw, files, path);
  EXPECT_EQ(lora.rank, 3 * r);
  EXPECT_EQ(lora.alpha / static_cast<double>(lora.rank), 2.0);
  NamedTensors merged_list = merge_lora(files, lora, lora.alpha / static_cast<double>(lora.rank));
  std::map<std::string, torch::Tensor> merged(merged_list.begin(), merged_list.end());
  auto delta = [&](const std::string& key) { return merged.at(key) - files.get(key); };
  auto expect = [&](const std::string& m) { return 2.0 * torch::matmul(split.at(m).second, split.at(m).first); };
  auto near = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ((a - b).norm() / b.norm()).item<double>() < 1e-6;
  };
  for (const auto& [ours, theirs] : blocks) {
    const auto qkv = delta(ours + ".attn.qkv_proj.weight").view({H, 3, Dh, D});  // row h·3Dh + part·Dh + d
    const char* parts[] = {"to_q", "to_k", "to_v"};
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_TRUE(near(qkv.select(1, j), expect(theirs + ".attn." + parts[j]).view({H, Dh, D}))) << ours << parts[j];
    EXPECT_TRUE(near(delta(ours + ".attn.out_proj.weight"), expect(theirs + ".attn.to_out.0")));
    const auto fc1 = delta(ours + ".mlp.fc1.weight"), up_gate = expect(theirs + ".ff.net.0.proj");
    EXPECT_TRUE(near(fc1.narrow(0, 0, F), up_gate.narrow(0, F, F)));  // gate
    EXPECT_TRUE(near(fc1.narrow(0, F, F), up_gate.narrow(0, 0, F)));  // up
    EXPECT_TRUE(near(delta(ours + ".mlp.fc2.weight"), expect(theirs + ".ff.net.2")));
  }

  // Into the model: the attached rank-3r LoRA loaded from the split file gives the folded checkpoint's forward.
  torch::NoGradGuard ng;
  const auto in = h3_fixture_inputs(files, torch::kCPU);
  H3DiT model(cfg);
  load_h3_weights(*model, files);
  LoraConfig lc;
  lc.rank = lora.rank, lc.alpha = lora.alpha, lc.targets = model->lora_targets();
  attach_lora(*model, lc, 1);
  load_lora(*model, lora_for_model(*model, raw, path), path);
  const std::string merged_path = dir.file("merged.safetensors");
  save_safetensors(merged_path, merged_list);
  H3DiT folded(cfg);
  load_h3_weights(*folded, SafetensorsSet::open({merged_path}));
  const auto want = folded->forward(in).video_logits, got = model->forward(in).video_logits;
  EXPECT_LT(((got - want).norm() / want.norm()).item<double>(), 1e-5);

  // A split LoRA on a base that is not H3, and a module that is no H3 target, are refused by name.
  const auto wan = SafetensorsSet::open({test::fixture("wan_tiny_a.safetensors")});
  test::expect_error([&] { h3_lora_for_base(raw, wan, path); }, {path, "needs an H3 base", "q_norm"});
  save_safetensors(dir.file("odd.safetensors"), {{"transformer_blocks.0.norm1.lora_A.weight", torch::zeros({r, D})},
                                                 {"transformer_blocks.0.norm1.lora_B.weight", torch::zeros({D, r})}});
  test::expect_error([&] { h3_lora_for_base(read_lora(dir.file("odd.safetensors")), files, "odd"); },
                     {"odd", "transformer_blocks.0.norm1", "not an H3 LoRA target"});
}

}  // namespace
}  // namespace vdt
