// `vdt train causal` (docs/design.md §5) on CPU with the tiny preset and synthetic streams of 14 latent frames (spans
// of 6 chunks x 1 frame): the loss falls, the Python trainer's files, exact resume from the state slot (and the Python
// trainer's fresh-moment resume without it), a killed run re-run with the same command continues bit for bit, and with
// two in-process ranks the LoRA stays identical on both and sharding the frozen base changes nothing.
#include <signal.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/safetensors.h"
#include "distributed/local_group.h"
#include "model/lora.h"
#include "op_counter.h"
#include "test_util.h"
#include "train/causal_test_util.h"
#include "tools/synth.h"
#include "generate/generation_model.h"
#include "train/causal/causal_trainer.h"
#include "generate/window.h"
#include "train/loop/schedule.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;
using test::copy_before_last_save, test::expect_same_lora, test::log_without_time, test::read_jsonl,
    test::run_two_ranks;

class CausalTest : public test::SuiteDirTest<CausalTest> {
 public:
  static void write_suite_files(const test::TempDir& dir) { synth_root(test::wan_causal_root(dir.file("data"))); }

 protected:
  static CausalConfig config(const std::string& name, int64_t steps) {
    return test::causal_test_run(dir_->file("data"), dir_->file(name), "tiny", /*chunk_frames=*/1, steps);
  }
};

TEST_F(CausalTest, ShortRunValidationLossFalls) {
  auto c = config("falls", 60);
  c.val_every = 60, c.save_every = 60;
  const auto sum = train_causal(c);
  const auto val = read_jsonl(c.out + "/val_log.jsonl");
  ASSERT_EQ(val.size(), 2u);  // before the first step and at the end
  EXPECT_EQ(val[0]["step"], 0);
  EXPECT_LT(val[1]["val_loss"].get<double>(), 0.85 * val[0]["val_loss"].get<double>())
      << val[0].dump() << " -> " << val[1].dump();
  EXPECT_EQ(sum.steps, 60);
}

TEST_F(CausalTest, WritesTheSeedsFiles) {
  auto c = config("files", 8);
  c.epochs = 10;  // unused beside --steps, but written as Python writes 10.0
  train_causal(c);
  // args.json: every flag as a string
  auto args = nlohmann::json::parse(std::ifstream(c.out + "/args.json"));
  EXPECT_EQ(args["objective"], "df");
  EXPECT_EQ(args["epochs"], "10.0");
  // A new LoRA is said loudly: the Python trainer would continue its released LoRA here.
  EXPECT_EQ(args["lora_start"].get<std::string>().rfind("fresh", 0), 0u) << args["lora_start"];
  EXPECT_EQ(args["lr"], "0.01");
  EXPECT_EQ(args["level_shift"], "3.0");  // Python's str(), as the Python trainer's {k: str(v)}
  EXPECT_EQ(args["steps"], "8");
  // val_samples.json: [clip_id, start frame] of the 3 val clips' 2 windows each; no val clip in training
  auto val = nlohmann::json::parse(std::ifstream(c.out + "/val_samples.json"));
  ASSERT_EQ(val.size(), 6u);
  std::set<std::string> val_clips;
  for (const auto& v : val) {
    val_clips.insert(v[0].get<std::string>());
    EXPECT_EQ(v[1].get<int64_t>() % 6, 0);
  }
  EXPECT_EQ(val_clips.size(), 3u);
  // train_log.jsonl: the Python trainer's keys, its lr (the schedule after the step)
  const auto log = read_jsonl(c.out + "/train_log.jsonl");
  ASSERT_EQ(log.size(), 8u);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(log[i]["step"], i + 1);
    for (const char* k : {"loss_v", "gnorm", "lr", "sec"}) EXPECT_TRUE(log[i].contains(k)) << k;
    EXPECT_NEAR(log[i]["lr"].get<double>(), 1e-2 * warmup_cosine_factor(i + 1, 2, 8, 1e-2), 1e-12);
  }
  // lora_step files every 4 steps: bf16 with the Python trainer's metadata, loadable as a LoRA
  for (const int step : {4, 8}) {
    const auto path = lora_step_path(c.out, step);
    auto f = SafetensorsFile::open(path);
    const auto& m = f->metadata();
    EXPECT_EQ(m.at("step"), std::to_string(step));
    EXPECT_EQ(m.at("objective"), "df");
    EXPECT_EQ(m.at("span_chunks"), "6");
    EXPECT_EQ(m.at("level_shift"), "3.0");  // Python's str(3.0), as the Python trainer writes it
    EXPECT_EQ(m.at("base"), "tiny");
    for (const auto& k : f->keys())  // factors in bf16; kohya's per-module alpha in float32 (exact for any alpha)
      EXPECT_EQ(f->entry(k).dtype, k.size() > 6 && k.substr(k.size() - 6) == ".alpha" ? "F32" : "BF16") << k;
    const auto w = read_lora(path);
    EXPECT_EQ(w.rank, 4);
    EXPECT_GT(w.modules.size(), 0u);
    EXPECT_TRUE(w.modules.count("blocks.0.self_attn.q") && w.modules.count("blocks.0.cross_attn.o") &&
                w.modules.count("blocks.0.ffn.2"));
  }
}

// `vdt sample --causal`: the base rebuilt from the LoRA's metadata, the run's val windows sampled chunk by chunk.
TEST_F(CausalTest, SampleCausalWritesTheValWindows) {
  auto c = config("sample", 4);
  train_causal(c);
  const auto out = dir_->file("sample_out");
  ASSERT_EQ(test::spawn_vdt({"sample", "--causal", "--lora", lora_step_path(c.out, 4), "--data_root", c.data_root,
                             "--out", out, "--n", "2", "--steps", "4"},
                            {}),
            0);
  auto val = nlohmann::json::parse(std::ifstream(c.out + "/val_samples.json"));
  for (int i = 0; i < 2; ++i) {
    const auto f = SafetensorsFile::open(out + "/" + val[i][0].get<std::string>() + "_f" +
                                         std::to_string(val[i][1].get<int64_t>()) + ".safetensors");
    const auto s = f->get("sample"), gt = f->get("ground_truth");
    EXPECT_EQ(s.sizes(), (std::vector<int64_t>{16, 6, 8, 8}));
    EXPECT_EQ(s.sizes(), gt.sizes());
    EXPECT_TRUE(torch::isfinite(s).all().item<bool>());
  }
}

// New prompts (`vdt sample --causal --prompt`): the conditioned branch takes the prompt in every frame, the noise
// and ground truth stay the window's; a prompt not in the table is named in the error. The CLI asks for the encoder.
TEST_F(CausalTest, SampleCausalWindowWithAPromptConditionsEveryFrameOnIt) {
  auto model = build_base("tiny", "", 7, torch::kCPU, torch::kFloat32);
  CausalDataConfig dc;
  dc.root = dir_->file("data"), dc.span_frames = 6, dc.seed = 7, dc.val_clips = 2;
  CausalDataset ds(dc);
  EulerConfig ec;
  ec.steps = 3, ec.cfg_scale = 3.0;
  const auto own = sample_causal_window(*model, ds, 0, 1, ec, 5, false);
  const auto w = ds.load(ds.val().at(0), ds.val_start(0));
  const auto& prompts = ds.text_table()->prompts();
  const std::string other = *std::find_if(prompts.begin(), prompts.end(), [&](const std::string& p) {
    return ds.text_table()->row_of(p) != w.text_rows[0] && p != ds.info().null_prompt;
  });
  const auto a = sample_causal_window(*model, ds, 0, 1, ec, 5, false, &other);
  EXPECT_TRUE(torch::equal(a.ground_truth, own.ground_truth));
  EXPECT_FALSE(torch::allclose(a.sample, own.sample));
  // The window's own text in every frame, when the window has one prompt, is the window's sample.
  if (std::all_of(w.text_rows.begin(), w.text_rows.end(), [&](int64_t r) { return r == w.text_rows[0]; })) {
    const auto same = prompts.at(static_cast<size_t>(w.text_rows[0]));
    EXPECT_TRUE(torch::equal(sample_causal_window(*model, ds, 0, 1, ec, 5, false, &same).sample, own.sample));
  }
  const std::string missing = "a prompt that is not in the table";
  test::expect_error([&] { sample_causal_window(*model, ds, 0, 1, ec, 5, false, &missing); }, {missing});

  auto c = config("sample_prompt", 1);
  train_causal(c);
  const auto r = test::run_vdt("sample --causal --lora '" + lora_step_path(c.out, 1) + "' --data_root '" + c.data_root +
                               "' --out '" + dir_->file("sample_prompt_out") + "' --prompt 'a red ball'");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--text-encoder"), std::string::npos) << r.output;
}

// A preempted run: the directory as it was after step 8 (lora_step00012 and the slot of step 12 never written).
TEST_F(CausalTest, ResumeFromTheStateSlotIsExact) {
  const auto full = config("exact_full", 12), cut = config("exact_cut", 12);
  test::expect_exact_resume(full, cut, /*start_step=*/8);
  EXPECT_EQ(log_without_time(full.out + "/train_log.jsonl"), log_without_time(cut.out + "/train_log.jsonl"));
  auto a = SafetensorsFile::open(lora_step_path(full.out, 12)), b = SafetensorsFile::open(lora_step_path(cut.out, 12));
  for (const auto& k : a->keys()) EXPECT_TRUE(torch::equal(a->get(k), b->get(k))) << k;
}

// TensorBoard as the SFT trainer writes it, read back by tensorboard's own reader: train/ scalars equal to
// train_log.jsonl (float32), val/loss equal to val_log.jsonl, the run's flags in the HParams dashboard with their
// types, and at each validation a sample preview of val window 0 (ground truth above sample, decoded by the root's
// VAE) both as previews/step_NNNNNNN.png and as an image summary holding the same PNG. Drawing previews changes no
// training number; a resumed run marks the replayed steps stale.
TEST_F(CausalTest, TensorBoardScalarsHparamsAndPreviews) {
  auto c = config("tb", 4);
  c.val_every = 2, c.preview_steps = 2, c.save_every = 2;
  const auto sum = train_causal(c);
  auto off = config("tb_no_preview", 4);
  off.val_every = 2, off.preview_steps = 0;
  const auto sum_off = train_causal(off);
  EXPECT_EQ(sum.losses, sum_off.losses);
  expect_same_lora(sum.lora, sum_off.lora);
  EXPECT_FALSE(fs::exists(off.out + "/previews"));
  for (const int64_t step : {0, 2, 4}) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%07lld.png", static_cast<long long>(step));
    EXPECT_TRUE(fs::exists(fs::path(c.out) / "previews" / name)) << name;
  }

  const auto tb = test::read_tensorboard(c.out + "/tensorboard");
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  const auto log = read_jsonl(c.out + "/train_log.jsonl");
  ASSERT_EQ(tb.scalars.count("train/loss_v"), 1u);
  const auto& loss = tb.scalars.at("train/loss_v");
  ASSERT_EQ(loss.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(loss[i].first, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(loss[i].second, static_cast<float>(log[i]["loss_v"].get<double>()));
    EXPECT_EQ(tb.scalars.at("train/grad_norm")[i].second, static_cast<float>(log[i]["gnorm"].get<double>()));
    EXPECT_EQ(tb.scalars.at("train/lr")[i].second, static_cast<float>(log[i]["lr"].get<double>()));
  }
  for (const char* k : {"train/step_time", "train/data_time", "train/mem_gb"}) EXPECT_EQ(tb.scalars.count(k), 1u) << k;
  const auto val = read_jsonl(c.out + "/val_log.jsonl");
  ASSERT_EQ(tb.scalars.count("val/loss"), 1u);
  ASSERT_EQ(tb.scalars.at("val/loss").size(), val.size());
  for (size_t i = 0; i < val.size(); ++i) {
    EXPECT_EQ(tb.scalars.at("val/loss")[i].first, val[i]["step"].get<int64_t>());
    EXPECT_EQ(tb.scalars.at("val/loss")[i].second, static_cast<float>(val[i]["val_loss"].get<double>()));
  }
  // hparams: every flag, typed
  EXPECT_EQ(tb.hparams.size(), CausalConfig::fields().size());
  EXPECT_EQ(tb.hparams.at("lr"), "n:0.01");
  EXPECT_EQ(tb.hparams.at("objective"), "s:df");
  EXPECT_EQ(tb.hparams.at("random_init"), "b:1");
  EXPECT_EQ(tb.hparams.at("preview_steps"), "n:2.0");
  EXPECT_EQ(tb.metric_tags, (std::vector<std::string>{"train/loss_v", "val/loss"}));
  // previews: one tag (val window 0), steps 0, 2, 4; 2 rows of 6 frames, each frame the latent grid x sem_scale x 4
  ASSERT_EQ(tb.images.size(), 1u);
  const auto val_samples = nlohmann::json::parse(std::ifstream(c.out + "/val_samples.json"));
  const std::string tag =
      "preview/" + val_samples[0][0].get<std::string>() + "@" + std::to_string(val_samples[0][1].get<int64_t>());
  ASSERT_EQ(tb.images.count(tag), 1u) << tb.images.begin()->first;
  const auto& ims = tb.images.at(tag);
  ASSERT_EQ(ims.size(), 3u);
  const auto ds = nlohmann::json::parse(std::ifstream(dir_->file("data") + "/dataset.json"));
  const int64_t fh = ds["latent_hw"][0].get<int64_t>() * ds["sem_scale"].get<int64_t>() * 4;
  const int64_t fw = ds["latent_hw"][1].get<int64_t>() * ds["sem_scale"].get<int64_t>() * 4;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ims[i].step, static_cast<int64_t>(2 * i));
    EXPECT_EQ(ims[i].height, 2 * (fh + 2) + 2);
    EXPECT_EQ(ims[i].width, 6 * (fw + 2) + 2);
  }
  // the ground-truth row is the same at every step, the sample row moves as the LoRA trains
  const size_t row_bytes = static_cast<size_t>(ims[0].width) * 3 * static_cast<size_t>(fh + 2);
  EXPECT_TRUE(std::equal(ims[0].rgb.begin(), ims[0].rgb.begin() + row_bytes, ims[2].rgb.begin()));
  EXPECT_NE(ims[0].rgb, ims[2].rgb);

  // killed after logging step 4, before its save, and re-run: resumed at step 2, the reader shows steps 1..4 once
  auto cut = config("tb_cut", 4);
  cut.val_every = 2, cut.preview_steps = 2, cut.save_every = 2;
  copy_before_last_save(c.out, cut.out, 4);
  ASSERT_EQ(train_causal(cut).start_step, 2);
  const auto tb2 = test::read_tensorboard(cut.out + "/tensorboard");
  const auto& loss2 = tb2.scalars.at("train/loss_v");
  ASSERT_EQ(loss2.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(loss2[i].first, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(loss2[i].second, loss[i].second);
  }
  EXPECT_EQ(tb2.images.at(tag).size(), 3u);  // steps 0, 2 from the first run, 4 from the re-run
}

// The SFT trainer's --resume on the causal trainer: another run's state continues exactly into a fresh --out, and a
// --out that already holds a run is refused (re-running without --resume continues that one).
TEST_F(CausalTest, ResumeFromAnotherRunsStateIntoAFreshOut) {
  auto full = config("resume_full", 12);
  const auto ref = train_causal(full);
  auto first = config("resume_first", 12);
  first.steps = 12;
  copy_before_last_save(full.out, first.out, 12);  // a run whose newest state is step 8
  auto next = config("resume_next", 12);
  next.resume = first.out;
  const auto resumed = train_causal(next);
  EXPECT_EQ(resumed.start_step, 8);
  EXPECT_NE(resumed.resume_how.find("exact"), std::string::npos) << resumed.resume_how;
  expect_same_lora(ref.lora, resumed.lora);
  auto again = next;
  test::expect_error([&] { train_causal(again); }, {"--resume", "already holds", "without --resume"});
}

TEST_F(CausalTest, WithoutAStateSlotResumesFromTheNewestLoraWithFreshMoments) {
  auto c = config("seedlike", 8);
  train_causal(c);
  for (const char* s : {"state_A", "state_B", "state"}) fs::remove_all(c.out + "/" + s);
  fs::remove(lora_step_path(c.out, 8));
  const auto r = train_causal(c);
  EXPECT_EQ(r.start_step, 4);
  EXPECT_NE(r.resume_how.find("afresh"), std::string::npos) << r.resume_how;
  EXPECT_EQ(read_jsonl(c.out + "/train_log.jsonl").size(), 8u);  // lines after step 4 replaced, not duplicated
}

TEST_F(CausalTest, AFinishedRunHasNothingToDoAndAShorterOneIsRefused) {
  auto c = config("finished", 4);
  train_causal(c);
  const auto again = train_causal(c);
  EXPECT_EQ(again.start_step, 4);
  EXPECT_EQ(again.steps, 4);
  c.steps = 2;
  test::expect_error([&] { train_causal(c); }, {"lora_step00004", "past this run's 2 steps"});
}

TEST_F(CausalTest, TeacherForcingTrains) {
  auto c = config("tf", 6);
  c.objective = "tf", c.clean_first_frame = true;
  const auto sum = train_causal(c);
  EXPECT_TRUE(std::isfinite(sum.last_loss));
  for (const auto& row : read_jsonl(c.out + "/train_log.jsonl")) EXPECT_GT(row["gnorm"].get<double>(), 0);
  EXPECT_EQ(SafetensorsFile::open(lora_step_path(c.out, 6))->metadata().at("objective"), "tf");
}

// --attn-keep and --act-offload (a no-op for CPU tensors; wired through the same runner) change no number: the LoRA
// and every loss equal the plain run's, with block checkpointing and with the second block of two recomputing whole
// under --checkpointing selective --selective-blocks 1.
TEST_F(CausalTest, AttentionKeepAndOffloadChangeNothing) {
  for (const bool selective : {false, true}) {
    auto plain = config(selective ? "keep_sel_plain" : "keep_plain", 4), kept = plain;
    kept.out = dir_->file(selective ? "keep_sel" : "keep");
    if (selective)
      plain.memory.checkpointing = kept.memory.checkpointing = "selective",
      plain.memory.selective_blocks = kept.memory.selective_blocks = 1;
    kept.causal_memory.attn_keep = 0.5, kept.causal_memory.act_offload = "on";
    const char* attention = "aten::_scaled_dot_product_flash_attention_for_cpu";
    std::optional<test::OpCounter> counter(attention);
    const auto a = train_causal(plain);
    const int64_t plain_calls = counter->calls();
    counter.emplace(attention);
    const auto b = train_causal(kept);
    EXPECT_LT(counter->calls(), plain_calls) << "the kept chunks' attention is not run again";
    EXPECT_EQ(a.lora_crc, b.lora_crc) << "selective " << selective;
    expect_same_lora(a.lora, b.lora);
    const auto la = read_jsonl(plain.out + "/train_log.jsonl"), lb = read_jsonl(kept.out + "/train_log.jsonl");
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i]["loss_v"], lb[i]["loss_v"]) << "step " << i;
  }
}

TEST_F(CausalTest, BadFlagsAndDataNameTheCulprit) {
  auto c = config("bad", 4);
  c.objective = "xf";
  test::expect_error([&] { train_causal(c); }, {"--objective", "'xf'"});
  c = config("bad", 4);
  c.chunk_frames = 3;  // spans of 18 frames: every stream of 14 is too short
  test::expect_error([&] { train_causal(c); }, {"shorter than the span of 18"});
  // --chunk-frames 0 given is the flag's fault, not the data's; left out (0 in a config built in code) is the base's.
  c = config("bad", 4);
  c.chunk_frames = 0, c.memory.given = {"--chunk-frames"};
  test::expect_error([&] { c.validate(); }, {"--chunk-frames 0: expected >= 1", "leave --chunk-frames out"});
  c.memory.given.clear();
  c.validate();
  const auto r = test::run_vdt("train causal --model tiny --random-init --data-root " + dir_->file("data") + " --out " +
                               dir_->file("bad_cli") + " --device cpu --chunk-frames 0 --steps 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--chunk-frames 0: expected >= 1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("usable clips"), std::string::npos) << r.output;
}

// Two in-process ranks: the LoRA is bitwise the same on both after every step (gradients all-reduced), and sharding
// the frozen blocks (gathered per block) gives bitwise the result of keeping them whole.
TEST_F(CausalTest, TwoRanksKeepOneLoraAndShardingChangesNothing) {
  auto run = [&](const std::string& name, const std::string& shard) {
    auto c = config(name, 6);
    c.shard_base = shard;
    return run_two_ranks(c);
  };
  const auto sharded = run("ranks_sharded", "on");
  expect_same_lora(sharded[0].lora, sharded[1].lora);
  EXPECT_EQ(sharded[0].lora_crc, sharded[1].lora_crc);
  EXPECT_EQ(sharded[0].last_loss, sharded[1].last_loss);
  const auto whole = run("ranks_whole", "off");
  expect_same_lora(sharded[0].lora, whole[0].lora);
  // 6 steps x 2 ranks = 12 windows: one rank doing the same 12 windows one per step is another trajectory, but the
  // files are those of a world-2 run: 6 log lines, args and LoRA files from rank 0 only.
  EXPECT_EQ(read_jsonl(dir_->file("ranks_sharded") + "/train_log.jsonl").size(), 6u);
}

// Previews on a base sharded over two ranks: both ranks sample (the blocks are gathered by every rank), rank 0 writes.
TEST_F(CausalTest, TwoShardedRanksDrawThePreviewTogether) {
  auto c = config("ranks_preview", 2);
  c.shard_base = "on", c.val_every = 2, c.preview_steps = 2;
  const auto ranks = run_two_ranks(c);
  expect_same_lora(ranks[0].lora, ranks[1].lora);
  EXPECT_TRUE(fs::exists(c.out + "/previews/step_0000000.png"));
  EXPECT_TRUE(fs::exists(c.out + "/previews/step_0000002.png"));
}

// Two ranks preempted after step 4 and re-run continue exactly (rank 0 saved LoRA and state, every rank loads them);
// re-run on one rank instead, the same global sample stream continues ("world size 2 -> 1").
TEST_F(CausalTest, TwoRanksResumeExactlyAndOneRankContinuesTheStream) {
  auto full = config("ranks_resume_full", 8);
  const auto ref = run_two_ranks(full);
  auto cut = config("ranks_resume_cut", 8);
  copy_before_last_save(full.out, cut.out, 8);
  const auto resumed = run_two_ranks(cut);
  EXPECT_EQ(resumed[0].start_step, 4);
  expect_same_lora(ref[0].lora, resumed[0].lora);
  expect_same_lora(resumed[0].lora, resumed[1].lora);
  EXPECT_EQ(log_without_time(full.out + "/train_log.jsonl"), log_without_time(cut.out + "/train_log.jsonl"));
  // One rank from the same step-4 state: 8 more windows continue the 2-rank stream at position 8.
  auto one = config("ranks_resume_one", 8);
  copy_before_last_save(full.out, one.out, 8);
  const auto single = train_causal(one);
  EXPECT_EQ(single.start_step, 4);
  EXPECT_NE(single.resume_how.find("world size 2 -> 1"), std::string::npos) << single.resume_how;
}

// Kill a run, re-run the same command, and it continues exactly.
TEST_F(CausalTest, KilledRunRerunWithTheSameCommandContinuesExactly) {
  const std::vector<std::string> base = {"train",
                                         "causal",
                                         "--data-root",
                                         dir_->file("data"),
                                         "--model",
                                         "tiny",
                                         "--random-init",
                                         "--device",
                                         "cpu",
                                         "--precision",
                                         "fp32",
                                         "--chunk-frames",
                                         "1",
                                         "--lora-rank",
                                         "4",
                                         "--lora-alpha",
                                         "4",
                                         "--val-clips",
                                         "3",
                                         "--lr",
                                         "1e-2",
                                         "--warmup",
                                         "2",
                                         "--steps",
                                         "150",
                                         "--save-every",
                                         "1000"};
  auto args = [&](const std::string& out) {
    auto a = base;
    a.insert(a.end(), {"--out", dir_->file(out)});
    return a;
  };
  ASSERT_EQ(test::spawn_vdt(args("kill_ref"), {}), 0);
  pid_t pid = 0;
  test::spawn_vdt(args("kill_run"), {}, &pid);
  int status = 0;
  bool exited = false;
  const auto log = dir_->file("kill_run") + "/train_log.jsonl";
  for (int i = 0; i < 30000 && read_jsonl(log).size() < 3; ++i) {
    if ((exited = ::waitpid(pid, &status, WNOHANG) == pid)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(exited) << "vdt exited early with status " << status;
  ::kill(pid, SIGTERM);
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const size_t stopped_at = read_jsonl(log).size();
  ASSERT_LT(stopped_at, 150u);
  EXPECT_TRUE(fs::exists(lora_step_path(dir_->file("kill_run"), static_cast<int64_t>(stopped_at))));
  ASSERT_EQ(test::spawn_vdt(args("kill_run"), {}), 0);  // the same command
  EXPECT_EQ(log_without_time(dir_->file("kill_ref") + "/train_log.jsonl"), log_without_time(log));
  auto a = SafetensorsFile::open(lora_step_path(dir_->file("kill_ref"), 150));
  auto b = SafetensorsFile::open(lora_step_path(dir_->file("kill_run"), 150));
  for (const auto& k : a->keys()) EXPECT_TRUE(torch::equal(a->get(k), b->get(k))) << k;
}

}  // namespace
}  // namespace vdt
