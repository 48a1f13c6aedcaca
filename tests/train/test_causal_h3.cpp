// `vdt train causal` on a MiniMax-H3 base (h3-tiny, CPU) and a synthetic H3 root (Picture 1, the silent audio stream,
// token tags): spans of 6 one-clip chunks, diffusion forcing and teacher forcing train, --picture1 2048 and the
// Python trainer's LoRA metadata, `vdt sample --causal` with the audio stream, exact resume, two in-process ranks keep
// one LoRA, two emulated nodes shard within each node, a logged loss is DiffSynth's weight on the H3 grid times the
// MSE, a left-out --init-lora is asked for, and a root of the wrong family or without the 2048 Picture 1 is refused up
// front.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "core/rng_purposes.h"
#include "core/safetensors.h"
#include "data/causal_dataset.h"
#include "model/denoiser_registry.h"
#include "model/h3/h3_config.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_weights.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/causal/causal_resume.h"
#include "train/causal_test_util.h"
#include "generate/model_inputs.h"

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
    c.val_clips = 2, c.init_lora = CausalConfig::kNoInitLora;  // an H3 base asks for the LoRA to start from
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

// DiffSynth's H3 loss at trainer level: a real step on a base whose output heads are zero (the prediction is 0, so
// each chunk's MSE is that of its target ε − x0, which the test draws from the same streams) logs
// loss_v = mean over chunks c of w(t_c)·(MSE(video of c) + MSE(audio of c)), w the bell weight of the grid point
// nearest t_c = 1000σ_c on DiffSynth's MiniMax-H3 training grid (shift 2.22, written out here), σ_c the chunk's level.
TEST_F(CausalH3Test, LoggedLossIsDiffSynthsWeightOnItsGridTimesTheMse) {
  const std::string weights = dir_->file("h3_zero_head.safetensors");
  auto model = make_denoiser("h3-tiny", torch::TensorOptions().dtype(torch::kFloat32));
  model->init_random_base(5);
  auto tensors = export_h3_weights(*std::dynamic_pointer_cast<H3DiTImpl>(model));
  for (auto& [k, t] : tensors)
    if (k.rfind("final_layer.video_out.", 0) == 0 || k.rfind("final_layer.audio_out.", 0) == 0)
      t = torch::zeros_like(t);
  save_safetensors(weights, tensors);
  auto c = config("zero_head", 1);
  c.model = "", c.random_init = false, c.weights = weights, c.max_samples = 1;  // one train window: step 1 takes it
  train_causal(c);
  const double logged = read_jsonl(c.out + "/train_log.jsonl").at(0)["loss_v"].get<double>();

  // The window of step 1 (global sample 0) and its draws, as the trainer keys them.
  CausalDataConfig dc;
  dc.root = c.data_root, dc.span_frames = 30, dc.val_clips = c.val_clips, dc.max_samples = 1, dc.seed = c.random.seed;
  CausalDataset ds(dc);
  fit_side_streams(*model, ds, 30, 5);
  ASSERT_EQ(ds.train().size(), 1u);
  const auto s = ds.load(ds.train()[0], ds.train_start(0, 0));
  auto draw = [&](const torch::Tensor& like, uint32_t purpose) {
    auto gen = make_generator(torch::Device(torch::kCPU), RngStream(c.random.seed, purpose).u64(0, 0));
    return torch::randn(like.sizes(), gen, torch::kFloat32);
  };
  const auto x0 = s.latents.unsqueeze(0).to(torch::kFloat32);              // [1, C, 30, H, W]
  const auto a0 = s.streams.at("audio").unsqueeze(0).to(torch::kFloat32);  // [1, 2, Da, A]
  const auto tv = draw(x0, rng_purpose::kCausalNoise) - x0;
  const auto ta = draw(a0, rng_purpose::kCausalSideNoise) - a0;
  const auto bounds = model->side_stream_chunks("audio", 30, 5);

  // DiffSynth's MiniMax-H3 training grid and weights: sigma = 2.22 b / (1 + 1.22 b), b = linspace(1, 0, 1001)[:-1];
  // y = exp(-2 ((1000 sigma - 500) / 1000)^2), minus its minimum, scaled to mean 1.
  auto weight_at = [](double t, double shift) {
    const auto b = torch::linspace(1.0, 0.0, 1001, torch::kFloat64).slice(0, 0, 1000);
    const auto T = 1000 * shift * b / (1 + (shift - 1) * b);
    const auto y = torch::exp(-2 * torch::pow((T - 500) / 1000, 2));
    const auto w = (y - y.min()) * 1000 / (y - y.min()).sum();
    return w[(T - t).abs().argmin().item<int64_t>()].item<double>();
  };
  double want = 0, wan_grid = 0;
  const RngStream levels(c.random.seed, rng_purpose::kCausalLevels);
  for (int64_t ch = 0; ch < 6; ++ch) {
    const double u = levels.uniform(0, 0, static_cast<uint32_t>(ch));
    const double t = 1000 * 3.0 * u / (1 + 2.0 * u);  // --level-shift 3
    const double mse = tv.narrow(2, ch * 5, 5).pow(2).mean().item<double>() +
                       ta.narrow(-1, bounds[ch], bounds[ch + 1] - bounds[ch]).pow(2).mean().item<double>();
    want += weight_at(t, 2.22) * mse / 6;
    wan_grid += weight_at(t, 5.0) * mse / 6;
  }
  EXPECT_NEAR(logged, want, 2e-4 * want);
  EXPECT_GT(std::abs(wan_grid - want), 10 * 2e-4 * want);  // Wan's grid would be told apart
}

// The Python trainer continues the released CWM LoRA when --init-lora is left out; on an H3 base vdt asks for the
// choice before the weights load. `none` trains a new LoRA and says so (start-up line, args.json); a re-run that
// continues its --out needs no choice. A Wan base keeps the fresh default (every Wan test leaves --init-lora out).
TEST_F(CausalH3Test, LeftOutInitLoraAsksForTheChoice) {
  auto c = config("choice", 1);
  c.init_lora = "";
  test::expect_error([&] { train_causal(c); },
                     {"--init-lora is needed on a MiniMax-H3 base", "--init-lora PATH", "--init-lora none"});
  EXPECT_FALSE(fs::exists(c.out + "/args.json"));  // stopped before the run wrote anything
  c.init_lora = CausalConfig::kNoInitLora;
  const auto sum = train_causal(c);
  EXPECT_EQ(sum.lora_start, kFreshLoraChosen);
  const auto args = nlohmann::json::parse(std::ifstream(c.out + "/args.json"));
  EXPECT_EQ(args["init_lora"], "none");
  EXPECT_EQ(args["lora_start"], kFreshLoraChosen);
  // The re-run of the same job, --init-lora left out: it continues the LoRA in --out.
  c.init_lora = "", c.steps = 2;
  const auto again = train_causal(c);
  EXPECT_EQ(again.start_step, 1);
  EXPECT_EQ(again.lora_start, "continued: the LoRA of the run being resumed");
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

// The command line that stands for the Python trainer's `--out RUN` (whose data and base are its project's paths):
// `--data-root H3ROOT --weights H3 --out RUN` without --model trains the H3 base
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
