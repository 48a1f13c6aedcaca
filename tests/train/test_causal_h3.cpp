// `vdt train causal` on a MiniMax-H3 base (h3-tiny, CPU) and a synthetic H3 root (Picture 1, the silent audio stream,
// token tags): spans of 6 one-clip chunks, diffusion forcing and teacher forcing train, --picture1 2048 and the
// Python trainer's LoRA metadata, `vdt sample --causal` with the audio stream, exact resume, two in-process ranks keep
// one LoRA, two emulated nodes shard within each node, and a root of the wrong family or without the 2048 Picture 1 is
// refused up front.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "model/denoiser_registry.h"
#include "model/h3/h3_config.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_weights.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/causal_test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;
using test::copy_before_last_save, test::expect_same_lora, test::read_jsonl, test::run_two_ranks;

class CausalH3Test : public test::SuiteDirTest<CausalH3Test> {
 public:
  static void write_suite_files(const test::TempDir& dir) {
    auto sc = test::h3_causal_root(dir.file("h3"), /*train_runs=*/3);  // 6 train (1 flagged) + 2 val clips
    sc.n_drop = 1;
    synth_root(sc);
  }

 protected:
  static CausalConfig config(const std::string& name, int64_t steps) {
    auto c = test::causal_test_run(dir_->file("h3"), dir_->file(name), "h3-tiny", /*chunk_frames=*/0, steps);
    c.val_clips = 2;
    return c;
  }
};

TEST_F(CausalH3Test, DiffusionForcingValidationLossFalls) {
  auto c = config("df", 40);
  c.val_every = 40, c.save_every = 40;
  const auto sum = train_causal(c);
  const auto val = read_jsonl(c.out + "/val_log.jsonl");
  ASSERT_EQ(val.size(), 2u);
  EXPECT_LT(val[1]["val_loss"].get<double>(), 0.85 * val[0]["val_loss"].get<double>())
      << val[0].dump() << " -> " << val[1].dump();
  const auto meta = SafetensorsFile::open(lora_step_path(c.out, 40))->metadata();
  EXPECT_EQ(meta.at("base"), "cwm");  // the Python trainer's name for its H3 world model
  EXPECT_EQ(meta.at("model"), "h3-tiny");
  EXPECT_EQ(meta.at("chunk_frames"), "5");  // the natural chunk: one VAE clip
  EXPECT_NE(meta.at("text_handling").find("docs/h3_model.md §4.2 (a)"), std::string::npos);
  EXPECT_EQ(sum.lora.size(), 2u * 4 * 3);  // A, B x 4 targets x (2 blocks + 1 refiner block)
}

TEST_F(CausalH3Test, TeacherForcingAndPicture2048Train) {
  auto c = config("tf", 4);
  c.objective = "tf", c.picture1 = "2048";
  const auto sum = train_causal(c);
  EXPECT_TRUE(std::isfinite(sum.last_loss));
  for (const auto& row : read_jsonl(c.out + "/train_log.jsonl")) EXPECT_GT(row["gnorm"].get<double>(), 0);
}

TEST_F(CausalH3Test, ResumeFromTheStateSlotIsExact) {
  test::expect_exact_resume(config("exact_full", 8), config("exact_cut", 8), /*start_step=*/4);
}

TEST_F(CausalH3Test, TwoRanksKeepOneLora) {
  auto c = config("ranks", 4);
  c.shard_base = "on";
  const auto r = run_two_ranks(c);
  expect_same_lora(r[0].lora, r[1].lora);
  EXPECT_EQ(r[0].lora_crc, r[1].lora_crc);
}

// The Python trainer's layout on two nodes of two: the frozen blocks sharded within each node (half the weights per
// rank, not a quarter), the LoRA's gradients summed over all four; every rank ends with one LoRA, the same as one node
// of four.
TEST_F(CausalH3Test, TwoNodesShardWithinEachNode) {
  auto c = config("nodes", 2);
  c.shard_base = "on";
  const auto nodes = test::run_ranks(c, 4, /*local_world=*/2);
  c.out = dir_->file("one_node");
  const auto one = test::run_ranks(c, 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(nodes[r].shard_ranks, 2);
    EXPECT_EQ(one[r].shard_ranks, 4);
    EXPECT_EQ(nodes[r].lora_crc, nodes[0].lora_crc);
  }
  EXPECT_NEAR(static_cast<double>(nodes[0].shard_bytes) / one[0].shard_bytes, 2.0, 0.05);
  expect_same_lora(nodes[0].lora, one[0].lora);
}

// --init-lora with an H3 LoRA in diffusers' split naming: the run takes rank 3r and alpha 3·alpha from it (the fused
// form, model/h3/h3_lora.h) and trains on.
TEST_F(CausalH3Test, InitLoraInSplitNamingTrainsOn) {
  const auto hc = h3_preset("h3-tiny");
  const int64_t r = 2;
  NamedTensors file;
  auto add = [&](const std::string& m, int64_t in, int64_t out) {
    file.emplace_back(m + ".lora_A.weight", torch::randn({r, in}) * 0.1);
    file.emplace_back(m + ".lora_B.weight", torch::randn({out, r}) * 0.01);
  };
  for (int64_t b = 0; b < hc.num_layers + hc.refiner_layers; ++b) {
    const std::string blk = b < hc.num_layers ? "transformer_blocks." + std::to_string(b)
                                              : "token_refiner.refiner_blocks." + std::to_string(b - hc.num_layers);
    for (const char* p : {"to_q", "to_k", "to_v"}) add(blk + ".attn." + p, hc.hidden, hc.inner());
    add(blk + ".attn.to_out.0", hc.inner(), hc.hidden);
    add(blk + ".ff.net.0.proj", hc.hidden, 2 * hc.ffn);
    add(blk + ".ff.net.2", hc.ffn, hc.hidden);
  }
  const std::string init = dir_->file("split_init.safetensors");
  save_safetensors(init, file, {{"alpha", "4"}});
  auto c = config("split_init", 2);
  c.init_lora = init, c.lora_rank = -1, c.lora_alpha = -1;  // left out: the file decides
  const auto sum = train_causal(c);
  EXPECT_TRUE(std::isfinite(sum.last_loss));
  const auto meta = SafetensorsFile::open(lora_step_path(c.out, 2))->metadata();
  EXPECT_EQ(meta.at("rank"), "6");
  EXPECT_EQ(std::stod(meta.at("alpha")), 12.0);
}

// `vdt sample --causal` on an H3 LoRA: the base, Picture 1 choice and targets from the LoRA's metadata, the val windows
// sampled chunk by chunk with the silent audio stream sampled beside the video; the same seed gives the same sample.
TEST_F(CausalH3Test, SampleCausalSamplesVideoAndAudio) {
  auto c = config("sample", 2);
  c.picture1 = "2048";
  train_causal(c);
  EXPECT_EQ(SafetensorsFile::open(lora_step_path(c.out, 2))->metadata().at("picture1"), "2048");
  auto val = nlohmann::json::parse(std::ifstream(c.out + "/val_samples.json"));
  const std::string name = val[0][0].get<std::string>() + "_f" + std::to_string(val[0][1].get<int64_t>());
  std::vector<torch::Tensor> runs;
  for (const char* out : {"sample_a", "sample_b"}) {
    ASSERT_EQ(test::spawn_vdt({"sample", "--causal", "--lora", lora_step_path(c.out, 2), "--data_root", c.data_root,
                               "--out", dir_->file(out), "--n", "1", "--steps", "2", "--cfg", "2"},
                              {}),
              0);
    const auto f = SafetensorsFile::open(dir_->file(out) + "/" + name + ".safetensors");
    const auto s = f->get("sample"), a = f->get("audio.sample"), a0 = f->get("audio.ground_truth");
    EXPECT_EQ(s.sizes(), f->get("ground_truth").sizes());
    EXPECT_EQ(s.sizes(), (std::vector<int64_t>{24, 30, 4, 4}));
    EXPECT_EQ(a.sizes(), a0.sizes());
    EXPECT_EQ(a.size(0), 2);  // stereo rows of the audio stream
    EXPECT_TRUE(torch::isfinite(s).all().item<bool>() && torch::isfinite(a).all().item<bool>());
    EXPECT_TRUE(fs::exists(dir_->file(out) + "/" + name + ".png"));  // the synthetic root's preview
    runs.push_back(torch::cat({s.flatten(), a.flatten()}));
  }
  EXPECT_TRUE(torch::equal(runs[0], runs[1]));
}

TEST_F(CausalH3Test, WrongRootsAreRefusedUpFront) {
  test::TempDir d;
  SynthConfig wan;
  wan.out = d.file("wan"), wan.latent_channels = 24, wan.text_dim = 48, wan.latent_frames = 32;
  wan.train_runs = 2, wan.val_runs = 1, wan.n_drop = 0;
  synth_root(wan);
  auto c = config("wrong", 2);
  c.data_root = wan.out;
  test::expect_error([&] { train_causal(c); }, {"--model h3-tiny is a h3 base", "model_family wan"});
  // A root without 2048 Picture 1 latents: --picture1 2048 names a clip's file before any step.
  const std::string copy = d.file("no2048");
  fs::copy(dir_->file("h3"), copy, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(copy + "/latents")) {
    const std::string lat = e.path().string();
    auto f = SafetensorsFile::open(lat);
    save_safetensors(lat + ".new", {{"latents", f->get("latents").clone()}, {"picture1", f->get("picture1").clone()}});
    f.reset();
    fs::rename(lat + ".new", lat);
  }
  c = config("no2048", 2);
  c.data_root = copy, c.picture1 = "2048";
  test::expect_error([&] { train_causal(c); }, {copy + "/latents/", "picture1_2048", "--picture1 native"});
}

// The Python trainer's command line: `--data-root H3ROOT --weights H3 --out RUN` without --model trains the H3 base
// the root names (model_family) at the preset of the weights' shapes; a --model or weights that contradict the root or
// each other stop the run naming both; a random base with no --model asks for one.
TEST_F(CausalH3Test, TheBaseComesFromTheRootAndTheWeights) {
  const std::string weights = dir_->file("h3_tiny_base.safetensors");
  {
    auto m = make_denoiser("h3-tiny", torch::TensorOptions().dtype(torch::kFloat32));
    m->init_random_base(3);
    save_safetensors(weights, export_h3_weights(*std::dynamic_pointer_cast<H3DiTImpl>(m)));
  }
  auto c = config("from_root", 1);
  c.model = "", c.random_init = false, c.weights = weights;
  const auto sum = train_causal(c);
  EXPECT_EQ(sum.steps, 1);
  const auto args = nlohmann::json::parse(std::ifstream(c.out + "/args.json"));
  EXPECT_EQ(args["model"], "h3-tiny");
  EXPECT_EQ(SafetensorsFile::open(lora_step_path(c.out, 1))->metadata().at("model"), "h3-tiny");
  // --model of the other family: the root says h3
  c = config("conflict_model", 1);
  c.model = "tiny", c.random_init = false, c.weights = weights;
  test::expect_error([&] { train_causal(c); }, {"--model tiny is a wan base", "model_family h3"});
  // H3 weights on a Wan root
  test::TempDir d;
  SynthConfig wan;
  wan.out = d.file("wan"), wan.latent_channels = 24, wan.text_dim = 48, wan.latent_frames = 32;
  wan.train_runs = 2, wan.val_runs = 1, wan.n_drop = 0;
  synth_root(wan);
  c = config("conflict_weights", 1);
  c.data_root = wan.out, c.model = "", c.random_init = false, c.weights = weights;
  test::expect_error([&] { train_causal(c); },
                     {"--weights " + weights + " is a h3 base (h3-tiny)", "model_family wan"});
  // A random base has no shapes: --model is needed, and the error lists the root's presets
  c = config("random_no_model", 1);
  c.model = "";
  test::expect_error([&] { train_causal(c); }, {"--model is needed", "minimax-h3, h3-tiny"});
}

}  // namespace
}  // namespace vdt
