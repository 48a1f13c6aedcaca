// Fidelity to the Python trainer gc25d where a migrating user would notice: validation logs the grid point it
// evaluates, exports carry the Python trainer's metadata keys as strings, done.json and config.json the Python
// trainer's keys, TensorBoard hides the steps a resumed run replays, base weights are required (or --random-init said
// explicitly) and named with their checksum, the per-cell text rule stops a run before any model work, and the command
// line parses as argparse.
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file_checksum.h"
#include "core/safetensors.h"
#include "data/data_test_util.h"
#include "diffusion/flow_match.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/sft/sft_trainer.h"
#include "train/sft_test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

class SeedFidelity : public test::SftSuiteTest<SeedFidelity> {
 protected:
  static SftConfig config(const std::string& name, int64_t steps) {
    auto c = run_config(name, steps);
    c.val_every = 2, c.val_n = 2, c.val_timesteps = "200,500";
    return c;
  }
  static nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(std::ifstream(path)); }
};

// The Python trainer's run_validation keys its rows by the grid timestep it evaluates: --val_timesteps 200 snaps to
// 201.34 (val_log.csv) and logs val/mse_t201.
TEST_F(SeedFidelity, ValidationLogsTheEvaluatedGridTimestep) {
  auto c = config("val", 2);
  train_sft(c);
  const auto rows = test::read_csv(c.output + "/val_log.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NEAR(std::stod(rows[0].at("timestep")), 201.342, 1e-3);
  EXPECT_NEAR(std::stod(rows[1].at("timestep")), 500.600, 1e-3);
  const auto tb = test::read_tensorboard(c.output + "/tensorboard");
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  for (const char* tag : {"val/mse_t201", "val/gap_uncond_t201", "val/mse_t501", "val/mse_mean"})
    EXPECT_TRUE(tb.scalars.count(tag)) << tag;
  EXPECT_FALSE(tb.scalars.count("val/mse_t200"));
}

// Every top-level key of the Python trainer's export_metadata, each a string as its {k: str(v)}; done.json and
// config.json with the Python trainer's keys; a relative --output recorded absolute. train_log.csv as the Python
// trainer writes it: loss, mse, timestep and the drops are the step's last micro batch (loss = mse x the weight of that
// micro batch's t; a drop of one sample is 0 or 1, never a mean of two micro batches); the means over the micro batches
// are loss_mean / mse_mean. --no-val_uncond logs mse only, and validation runs at step % val_every == 0 only (not again
// at the last step).
TEST_F(SeedFidelity, TrainLogHoldsTheLastMicroBatchAndNoValUncondLogsOnlyMse) {
  auto c = config("last_micro", 7);
  c.grad_accum = 2, c.text_dropout = 0.5, c.cond_dropout = 0.5, c.val_every = 3, c.val_uncond = false;
  const auto sum = train_sft(c);
  const auto rows = test::read_csv(c.output + "/train_log.csv");
  ASSERT_EQ(rows.size(), 7u);
  const auto grid = training_grid(1000, flow_schedule("wan").train_shift);
  const auto w = training_weights(grid);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double t = std::stod(r.at("timestep")), weight = w[nearest_index(grid, t)].item<double>();
    EXPECT_NEAR(std::stod(r.at("loss")), std::stod(r.at("mse")) * weight, 1e-4 * std::stod(r.at("loss"))) << i;
    for (const char* k : {"text_drop", "cond_drop"}) {
      const double d = std::stod(r.at(k));
      EXPECT_TRUE(d == 0.0 || d == 1.0) << k << " " << d << " at row " << i;
    }
    EXPECT_NEAR(std::stod(r.at("loss_mean")), sum.losses[i], 1e-5 * sum.losses[i]) << i;
  }
  const auto val = test::read_csv(c.output + "/val_log.csv");
  ASSERT_EQ(val.size(), 4u);  // steps 3 and 6, two timesteps each; none at the last step 7
  for (const auto& v : val) {
    EXPECT_TRUE(v.at("step") == "3" || v.at("step") == "6") << v.at("step");
    EXPECT_FALSE(v.at("mse").empty());
    for (const char* k : {"mse_uncond", "mse_nulltext", "gap_uncond", "gap_nulltext"}) EXPECT_EQ(v.at(k), "") << k;
  }
  const auto tb = test::read_tensorboard(c.output + "/tensorboard");
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  EXPECT_TRUE(tb.scalars.count("val/mse_mean"));
  for (const char* tag : {"val/gap_uncond_mean", "val/mse_uncond_t201", "val/gap_nulltext_t501"})
    EXPECT_FALSE(tb.scalars.count(tag)) << tag;
}

TEST_F(SeedFidelity, ExportsDoneAndConfigCarryTheSeedsKeys) {
  auto c = config("keys", 2);
  c.val_every = 0;
  const auto sum = train_sft(c);
  const auto meta = SafetensorsFile::open(sum.last_export)->metadata();
  for (const char* k : {"vocab",        "data",         "data_root",    "step",
                        "res",          "cond_type",    "cond_key",     "stage",
                        "text_dropout", "cond_dropout", "mask_p",       "lr",
                        "cond_lr",      "weight_decay", "warmup_steps", "first_frame_cond",
                        "seed",         "init_ckpt",    "resumed_from", "resumed_step",
                        "model_dir",    "trainer"})
    EXPECT_TRUE(meta.count(k)) << k;
  EXPECT_EQ(meta.at("cond_type"), "ids");
  EXPECT_EQ(meta.at("cond_key"), "ids");
  EXPECT_EQ(meta.at("text_dropout"), "0.1");  // Python's str() of the float
  EXPECT_EQ(meta.at("lr"), "0.001");
  EXPECT_EQ(meta.at("warmup_steps"), "2");
  EXPECT_EQ(meta.at("first_frame_cond"), "True");
  EXPECT_EQ(meta.at("resumed_step"), "0");
  EXPECT_EQ(meta.at("stage"), "sft_bidirectional");
  const auto done = read_json(c.output + "/done.json");
  for (const char* k : {"step", "start_step", "peak_mem_gb_main", "peak_mem_gb_max", "s_per_step_mean",
                        "data_s_per_step_mean", "n_steps_timed", "data_pos", "finished"})
    EXPECT_TRUE(done.contains(k)) << k;
  EXPECT_EQ(done["start_step"], 0);
  EXPECT_TRUE(done["data_pos"].contains("epoch") && done["data_pos"].contains("epoch_micro"));
  const auto cfg = read_json(c.output + "/config.json");
  for (const char* k : {"args", "res", "dataset", "model", "env"}) EXPECT_TRUE(cfg.contains(k)) << k;
  EXPECT_EQ(cfg["args"]["cond_type"], "ids");
  EXPECT_EQ(cfg["model"]["start_step"], 0);
  EXPECT_TRUE(cfg["model"]["random_init"].get<bool>());
  // The keys the Python trainer's config.json has where scripts read them, with its types.
  for (const char* k : {"init_ckpt", "resumed_from", "resumed_step"}) EXPECT_TRUE(cfg["args"].contains(k)) << k;
  EXPECT_EQ(cfg["args"]["init_ckpt"], "");
  EXPECT_EQ(cfg["args"]["resumed_step"], 0);
  EXPECT_EQ(cfg["args"]["val_timesteps"], nlohmann::json::parse("[200.0, 500.0]"));
  EXPECT_TRUE(cfg["args"]["val_timesteps"][0].is_number_float());
  EXPECT_EQ(cfg["dataset"]["start_epoch"], 0);
  EXPECT_EQ(cfg["dataset"]["skip_micro"], 0);
  EXPECT_EQ(cfg["model"]["sem_cond_in_channels"], 20);  // vocab "parts": K = 20
  EXPECT_TRUE(cfg["model"].contains("resume_info") && cfg["model"]["resume_info"].is_null());
  const auto& keys = cfg["model"]["export_keys"];
  ASSERT_TRUE(keys.is_array());
  EXPECT_EQ(keys.size(), SafetensorsFile::open(sum.last_export)->keys().size());  // what an export holds
  EXPECT_NE(std::find(keys.begin(), keys.end(), "gc_sem_cond.patch.weight"), keys.end());
  const auto& env = cfg["env"];
  for (const char* k : {"argv", "python", "platform", "started", "cuda_visible_devices", "mixed_precision"})
    EXPECT_TRUE(env.contains(k)) << k;
  EXPECT_TRUE(env["argv"].is_array() && !env["argv"].empty());
  EXPECT_EQ(env["python"], "");
  EXPECT_EQ(env["mixed_precision"], "no");                   // fp32 here; --precision mixed is accelerate's "bf16"
  EXPECT_EQ(env["started"].get<std::string>().size(), 19u);  // %Y-%m-%d %H:%M:%S

  // A relative --output: from the current directory, recorded absolute.
  const auto cwd = fs::current_path();
  fs::current_path(dir_->path());
  auto rel = config("unused", 1);
  rel.output = "relative_run", rel.val_every = 0, rel.save_every = 0;
  train_sft(rel);
  fs::current_path(cwd);
  ASSERT_TRUE(fs::exists(dir_->file("relative_run") + "/config.json"));
  EXPECT_EQ(read_json(dir_->file("relative_run") + "/config.json")["args"]["output"], dir_->file("relative_run"));
}

// Killed after logging step 4, resumed from the state of step 2: the real TensorBoard reader shows each step once
// (the resumed writer's purge marker, SummaryWriter(purge_step=3)).
TEST_F(SeedFidelity, TensorBoardShowsAResumedRunsStepsOnce) {
  auto c = config("purge", 4);
  c.val_every = 0;
  train_sft(c);
  const std::string newest = fs::read_symlink(c.output + "/state").string();
  fs::remove(c.output + "/state");
  fs::remove_all(c.output + "/" + newest);  // the crash came before the state of step 4 was complete
  c.resume = "auto";
  const auto again = train_sft(c);
  ASSERT_EQ(again.start_step, 2);
  const auto tb = test::read_tensorboard(c.output + "/tensorboard");
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  const auto& loss = tb.scalars.at("train/loss");
  std::vector<int64_t> steps;
  for (const auto& [s, v] : loss) steps.push_back(s);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
}

// No silent random weights: --model_dir or an explicit --random-init; the start-up table names the weight files with
// their checksum (and config.json records them).
TEST_F(SeedFidelity, BaseWeightsAreRequiredAndNamedWithTheirChecksum) {
  auto c = config("weights", 1);
  c.random_init = false;
  test::expect_error([&] { train_sft(c); }, {"--model_dir is required", "--random-init"});
  // A base: the tiny preset's weights from an export of a random-init run.
  auto base = config("weights_base", 1);
  base.val_every = 0, base.save_every = 1;
  const auto exported = train_sft(base).last_export;
  fs::create_directories(dir_->file("model_dir"));
  fs::copy_file(exported, dir_->file("model_dir") + "/diffusion_pytorch_model.safetensors");
  c.model_dir = dir_->file("model_dir"), c.val_every = 0, c.save_every = 0;
  const auto sum = file_checksum(c.model_dir + "/diffusion_pytorch_model.safetensors");
  testing::internal::CaptureStdout();
  train_sft(c);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("| weights   " + sum.path), std::string::npos) << out;
  EXPECT_NE(out.find("crc32 " + sum.crc_hex()), std::string::npos) << out;
  EXPECT_EQ(out.find("RANDOM INIT"), std::string::npos) << out;
  EXPECT_NE(out.find("precision fp32  checkpointing none  workers"), std::string::npos) << out;  // what runs
  const auto cfg = read_json(c.output + "/config.json");
  EXPECT_EQ(cfg["model"]["weight_files"][0]["crc32"], sum.crc_hex());
  c.random_init = true;
  test::expect_error([&] { train_sft(c); }, {"--random-init", "--model_dir"});
}

// One prompt per clip on a root of 3 latent frames: the trainer's start-up validation stops with `vdt data check`'s
// message, before the model is built (it used to die inside WanDiT on context_ids).
TEST_F(SeedFidelity, TooFewPromptsPerLatentFrameStopBeforeTheModel) {
  test::TinyRoot t;
  t.info()["cells"] = 1;
  t.write_dataset_json();
  for (auto& clip : t.clips()) clip.cells.resize(1);
  t.write_index();
  auto c = config("cells", 1);
  c.data_root = t.root(), c.res = "832x480", c.val_every = 0;
  test::expect_error([&] { train_sft(c); },
                     {t.file("dataset.json"), "cells = 1 prompts per clip but latent_frames = 3", "HINT"});
}

// argparse's command line: a repeated flag takes the last value, an unambiguous prefix is the flag, an ambiguous one
// names the candidates, the Python trainer's --cond_type/--cond_key ids are accepted, a negative --seed is an error.
TEST(SeedCommandLine, ParsesAsArgparse) {
  const std::string base = "train sft --output /tmp/vdt_never_written --random-init ";
  auto r = test::run_vdt(base + "--data_root /nonexistent_first --data_root /nonexistent_last");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("/nonexistent_last"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("/nonexistent_first"), std::string::npos) << r.output;
  r = test::run_vdt(base + "--data_r /nonexistent_prefix --max_step 3 --cond_type ids --cond_key ids");
  EXPECT_NE(r.output.find("/nonexistent_prefix"), std::string::npos) << r.output;  // parsed; failed at the data
  r = test::run_vdt(base + "--data_root /nonexistent --val 3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("ambiguous option: --val could match"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--val_every"), std::string::npos) << r.output;
  r = test::run_vdt(base + "--data_root /nonexistent --no-first");  // --no-first_frame_cond
  EXPECT_EQ(r.output.find("ambiguous"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent"), std::string::npos) << r.output;
  r = test::run_vdt(base + "--data_root /nonexistent --cond_type parts");
  EXPECT_NE(r.output.find("--cond_type"), std::string::npos) << r.output;
  r = test::run_vdt(base + "--data_root /nonexistent --seed -1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--seed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("negative"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("/nonexistent"), std::string::npos) << r.output;  // stopped at the flag
  r = test::run_vdt("train causal --data-root /nonexistent --out /tmp/vdt_never_written --seed -5");
  EXPECT_NE(r.output.find("negative"), std::string::npos) << r.output;
  r = test::run_vdt("train sft --help");
  EXPECT_NE(r.output.find("relative path is taken from the current directory"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vdt
