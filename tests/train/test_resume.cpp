// Exact resume (docs/design.md §4, §8): a run stopped at step K and resumed matches the uninterrupted run in every
// logged column but the timings and memory (step_time, data_time: wall clock; mem_gb: the process's peak RSS), in its
// validation rows and bit for bit in its final weights and optimizer moments — mid-epoch, at an epoch boundary, before
// the short last step of an epoch (5 micro batches, grad_accum 2), with validation and export in between. Plus: a
// signal stop, a geometry change, vocab/res mismatches, a corrupt newest slot, kill -9 at every point of a save, and a
// full disk.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/state_slots.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/sft/sft_trainer.h"
#include "train/checkpoint/train_state.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;
using Rows = std::vector<std::map<std::string, std::string>>;

// Every logged column but the timings and memory.
Rows read_rows(const std::string& path) { return test::read_csv(path, {"step_time", "data_time", "mem_gb"}); }

void expect_same_tensors(const std::string& a, const std::string& b) {
  auto fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  ASSERT_EQ(fa->keys(), fb->keys()) << a << " vs " << b;
  for (const auto& k : fa->keys()) EXPECT_TRUE(torch::equal(fa->get(k), fb->get(k))) << k << ": " << a << " vs " << b;
}

std::string state_file(const std::string& run, const std::string& stem) {
  return run + "/state/" + stem + "-00000-of-00001.safetensors";
}

// One small synthetic root per test process: 6 train clips, 1 marked drop -> 5 micro batches of 1 -> with
// grad_accum 2 an epoch is 3 steps, the last one short.
class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthConfig sc;
    sc.out = dir_.file("data"), sc.train_runs = 2, sc.train_clips_per_run = 3, sc.n_drop = 1;
    res_ = synth_root(sc).res;
  }
  SftConfig config(const std::string& name, int64_t steps) const {
    SftConfig c;
    c.data_root = dir_.file("data"), c.output = dir_.file(name), c.res = res_;
    c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32";
    c.gradient_checkpointing = false;
    c.max_steps = steps, c.batch_size = 1, c.grad_accum = 2, c.lr = 1e-3, c.cond_lr = 1e-3, c.warmup_steps = 2;
    c.val_every = 2, c.val_n = 2, c.val_timesteps = "200,800", c.save_every = 2, c.num_workers = 1;
    return c;
  }
  // The uninterrupted reference run of `steps` steps.
  const SftConfig& full(int64_t steps) {
    if (!full_) {
      full_ = config("full", steps);
      train_sft(*full_);
    }
    return *full_;
  }
  void expect_same_run(const SftConfig& ref, const SftConfig& resumed, int64_t stopped_at) {
    EXPECT_EQ(read_rows(ref.output + "/train_log.csv"), read_rows(resumed.output + "/train_log.csv"));
    // The stopped run validated once more at its own end when that was not a validation step.
    auto val = read_rows(resumed.output + "/val_log.csv");
    if (stopped_at % ref.val_every != 0)
      val.erase(std::remove_if(val.begin(), val.end(),
                               [&](const auto& r) { return r.at("step") == std::to_string(stopped_at); }),
                val.end());
    EXPECT_EQ(read_rows(ref.output + "/val_log.csv"), val);
    expect_same_tensors(state_file(ref.output, "weights"), state_file(resumed.output, "weights"));
    expect_same_tensors(state_file(ref.output, "optimizer"), state_file(resumed.output, "optimizer"));
  }
  test::TempDir dir_;
  std::string res_;
  std::optional<SftConfig> full_;
};

TEST_F(ResumeTest, StopAndResumeEqualsTheUninterruptedRun) {
  const auto& ref = full(8);
  // K=3: the epoch boundary right after a short step; K=4: mid-epoch on a validation/export step; K=5: mid-epoch,
  // the short step next.
  for (int64_t k : {3, 4, 5}) {
    SCOPED_TRACE("stopped at step " + std::to_string(k));
    auto c = config("stop" + std::to_string(k), k);
    const auto first = train_sft(c);
    ASSERT_EQ(first.steps, k);
    c.max_steps = 8, c.resume = c.output;
    const auto second = train_sft(c);
    EXPECT_EQ(second.start_step, k);
    expect_same_run(ref, c, k);
    auto exported = SafetensorsFile::open(second.last_export);
    EXPECT_EQ(exported->metadata().at("resumed_step"), std::to_string(k));
    EXPECT_NE(exported->metadata().at("resumed_from").find("state_"), std::string::npos);
    EXPECT_EQ(exported->metadata().at("init_ckpt"), "");
    expect_same_tensors(ref.output + "/step-8.safetensors", second.last_export);
    EXPECT_TRUE(fs::exists(c.output + "/config_resume" + std::to_string(k) + ".json"));
  }
}

TEST_F(ResumeTest, AutoStartsFreshThenContinuesAndKeepsTheWarmStartLineage) {
  auto c = config("auto", 2);
  c.resume = "auto";
  EXPECT_EQ(train_sft(c).start_step, 0);  // nothing to resume yet
  c.max_steps = 3;
  const auto s = train_sft(c);
  EXPECT_EQ(s.start_step, 2);
  // A warm start's init_ckpt survives a directory resume.
  auto w = config("warm", 2);
  w.resume = c.output + "/step-2.safetensors";
  train_sft(w);
  w.resume = w.output, w.max_steps = 4;
  const auto s2 = train_sft(w);
  EXPECT_EQ(SafetensorsFile::open(s2.last_export)->metadata().at("init_ckpt"), c.output + "/step-2.safetensors");
}

TEST_F(ResumeTest, ASignalStopsAfterTheStepWithStateAndTheRunContinuesExactly) {
  const auto& ref = full(8);
  auto c = config("signal", 8);
  c.save_every = 0;  // the state comes from the stop alone
  std::atomic<bool> done{false};
  std::thread watcher([&] {  // SIGTERM once two steps are logged
    while (!done) {
      if (read_rows(c.output + "/train_log.csv").size() >= 2) {
        ::kill(::getpid(), SIGTERM);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const auto first = train_sft(c);
  done = true;
  watcher.join();
  ASSERT_TRUE(first.stopped);
  ASSERT_LT(first.steps, 8);
  EXPECT_EQ(first.state_dir.empty(), false);
  EXPECT_EQ(read_rows(c.output + "/train_log.csv").size(), static_cast<size_t>(first.steps));
  c.save_every = 2, c.resume = c.output;
  train_sft(c);
  // Validation steps and exports differ only by the save_every used before the stop; compare train rows and weights.
  EXPECT_EQ(read_rows(ref.output + "/train_log.csv"), read_rows(c.output + "/train_log.csv"));
  expect_same_tensors(state_file(ref.output, "weights"), state_file(c.output, "weights"));
}

TEST_F(ResumeTest, AChangedGeometryStartsTheNextEpoch) {
  auto c = config("geometry", 4);  // after step 4: epoch 1, 2 of its 5 micro batches used
  train_sft(c);
  c.grad_accum = 1, c.max_steps = 5, c.resume = c.output;
  train_sft(c);
  const auto rows = read_rows(c.output + "/train_log.csv");
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[3].at("epoch"), "1");
  EXPECT_EQ(rows[4].at("epoch"), "2");
  std::ifstream f(c.output + "/config_resume4.json");
  const auto j = nlohmann::json::parse(f);
  EXPECT_NE(j["resume"]["how"].get<std::string>().find("geometry changed"), std::string::npos);
  EXPECT_EQ(j["resume"]["skip_micro"], 0);
}

TEST_F(ResumeTest, VocabOrResMismatchIsAnErrorNamingBothValues) {
  auto c = config("mismatch", 2);
  train_sft(c);
  auto v = c;
  v.resume = c.output, v.vocab = "ids", v.max_steps = 3;
  test::expect_error([&] { train_sft(v); }, {"--vocab parts", "--vocab ids", "state_"});
  SynthConfig sc;  // the same world at another resolution
  sc.out = dir_.file("data_256"), sc.train_runs = 2, sc.train_clips_per_run = 3, sc.n_drop = 1;
  sc.latent_h = sc.latent_w = 16;
  const auto other = synth_root(sc).res;
  auto r = c;
  r.resume = c.output, r.data_root = sc.out, r.res = other, r.max_steps = 3;
  test::expect_error([&] { train_sft(r); }, {"--res " + res_, "--res " + other});
}

TEST_F(ResumeTest, ACorruptNewestSlotFallsBackToTheOlderOne) {
  const auto& ref = full(8);
  auto c = config("corrupt", 4);  // states at 2 (state_A) and 4 (state_B)
  train_sft(c);
  ASSERT_EQ(fs::read_symlink(c.output + "/state").string(), "state_B");
  {
    std::fstream f(state_file(c.output, "weights"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x7f');
  }
  c.resume = c.output, c.max_steps = 8;
  const auto s = train_sft(c);
  EXPECT_EQ(s.start_step, 2);
  EXPECT_EQ(read_rows(ref.output + "/train_log.csv"), read_rows(c.output + "/train_log.csv"));
  expect_same_tensors(state_file(ref.output, "weights"), state_file(c.output, "weights"));
}

TEST(ResumePosition, FollowsTheSeedsRules) {
  TrainerState st;
  st.step = 4, st.pos = {1, 2, 7};
  st.geometry = {1, 2, 1, 5, 5, 0};
  auto p = resume_position(st, st.geometry);
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.skip, 2);
  st.pos.epoch_micro = 5;  // used up
  p = resume_position(st, st.geometry);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(p.skip, 0);
  Geometry other = st.geometry;
  other.n_train = 6;
  p = resume_position(st, other);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(p.skip, 0);
  st.has_epoch = false, st.step = 7;  // 3 steps per epoch: step 7 = epoch 2 after 1 step (2 micro batches)
  p = resume_position(st, st.geometry);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(p.skip, 2);
  const auto j = st.to_json();
  EXPECT_EQ(j["epoch_micro"], 5);
  EXPECT_EQ(j["n_micro"], 5);  // flat geometry, as the Python trainer writes trainer_state.json
  test::expect_error([] { TrainerState::from_json(nlohmann::json{{"epoch", 1}}, "x.json"); }, {"x.json", "step"});
}

TEST(StateFaults, AFullDiskLeavesThePreviousStateIntact) {
  test::TempDir d;
  const auto run = d.path().string();
  TrainerState st;
  st.step = 1, st.geometry = {1, 1, 1, 1, 1, 0};
  NamedTensors w = {{"a", torch::ones({256, 1024})}}, o = {{"exp_avg.a", torch::zeros({256, 1024})}};
  auto single = make_single_rank();
  save_trainer_state(run, "", st, {w, o, {}}, *single);
  // A write that fails: the file-size limit (EFBIG) stands in for a full disk (ENOSPC); both fail write(2).
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  st.step = 2;
  std::string msg;
  try {
    save_trainer_state(run, "", st, {w, o, {}}, *single);
  } catch (const Error& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("step 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("write failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("state_B"), std::string::npos) << msg;
  EXPECT_NE(msg.find("previous state"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(run + "/state_B"));  // the partial slot was cleared
  const auto loaded = load_trainer_state(run, false);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->st.step, 1);
  EXPECT_TRUE(torch::equal(loaded->full("weight", "a"), w[0].second));
}

std::vector<std::string> cli_args(const std::string& data, const std::string& res, const std::string& out,
                                  int64_t steps) {
  return {"train",
          "sft",
          "--data_root",
          data,
          "--res",
          res,
          "--output",
          out,
          "--model",
          "tiny",
          "--random-init",
          "--device",
          "cpu",
          "--precision",
          "fp32",
          "--no-gradient_checkpointing",
          "--batch_size",
          "1",
          "--grad_accum",
          "2",
          "--num_workers",
          "1",
          "--lr",
          "1e-3",
          "--cond_lr",
          "1e-3",
          "--warmup_steps",
          "2",
          "--val_every",
          "0",
          "--save_every",
          "1",
          "--max_steps",
          std::to_string(steps)};
}

TEST_F(ResumeTest, SigintExitsZeroWithStateAndAutoResumeContinues) {
  auto args = cli_args(dir_.file("data"), res_, dir_.file("sigint"), 400);
  *(std::find(args.begin(), args.end(), "--save_every") + 1) = "0";  // no periodic saves: the state is the stop's
  pid_t pid = 0;
  test::spawn_vdt(args, {}, &pid);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 30000 && read_rows(dir_.file("sigint") + "/train_log.csv").size() < 2; ++i) {
    if ((exited = ::waitpid(pid, &status, WNOHANG) == pid)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(exited) << "vdt exited early with status " << status;
  ::kill(pid, SIGINT);
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto rows = read_rows(dir_.file("sigint") + "/train_log.csv");
  ASSERT_LT(rows.size(), 400u);
  const auto loaded = load_trainer_state(dir_.file("sigint"), false);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->st.step, static_cast<int64_t>(rows.size()));
  auto again = cli_args(dir_.file("data"), res_, dir_.file("sigint"), static_cast<int64_t>(rows.size()) + 2);
  again.insert(again.end(), {"--resume", "auto"});
  const int st2 = test::spawn_vdt(again, {});
  ASSERT_TRUE(WIFEXITED(st2) && WEXITSTATUS(st2) == 0);
  EXPECT_EQ(read_rows(dir_.file("sigint") + "/train_log.csv").size(), rows.size() + 2);
}

TEST_F(ResumeTest, KilledAtEveryPointOfASaveTheRunResumesFromAValidSlotAndEndsTheSame) {
  const auto data = dir_.file("data");
  // Reference: 3 uninterrupted steps, saving every step.
  ASSERT_EQ(test::spawn_vdt(cli_args(data, res_, dir_.file("ref"), 3), {}), 0);
  // Count the fault points of a 2-step run: the second step's save spans the points after the first link move.
  const auto trace = dir_.file("trace.log");
  ASSERT_EQ(test::spawn_vdt(cli_args(data, res_, dir_.file("trace"), 2), {"VDT_FAULT_TRACE=1"}, nullptr, trace), 0);
  std::ifstream tf(trace);
  std::vector<std::string> points;
  for (std::string line; std::getline(tf, line);)
    if (line.rfind("[fault] point ", 0) == 0) points.push_back(line.substr(line.find(": ") + 2));
  const auto first_link = std::find(points.begin(), points.end(), "slot: link moved");
  ASSERT_NE(first_link, points.end());
  const size_t begin = static_cast<size_t>(first_link - points.begin()) + 2;  // 1-based index of the next point
  ASSERT_GT(points.size(), begin + 5);
  for (size_t k = begin; k <= points.size(); ++k) {
    SCOPED_TRACE("killed at point " + std::to_string(k) + ": " + points[k - 1]);
    const auto out = dir_.file("kill" + std::to_string(k));
    const int status = test::spawn_vdt(cli_args(data, res_, out, 2), {"VDT_FAULT_KILL_AT=" + std::to_string(k)});
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    const auto slot = find_slot(out, nullptr);
    ASSERT_TRUE(slot.has_value());
    const bool sealed = std::find(points.begin() + static_cast<long>(begin) - 1, points.begin() + static_cast<long>(k),
                                  "slot: manifest written") != points.begin() + static_cast<long>(k);
    EXPECT_EQ(slot->info["step"].get<int64_t>(), sealed ? 2 : 1);
    auto resume = cli_args(data, res_, out, 3);
    resume.insert(resume.end(), {"--resume", "auto"});
    const int st2 = test::spawn_vdt(resume, {});
    ASSERT_TRUE(WIFEXITED(st2) && WEXITSTATUS(st2) == 0);
    expect_same_tensors(state_file(dir_.file("ref"), "weights"), state_file(out, "weights"));
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace vdt

namespace vdt {
namespace {

// One checkpointer for both trainers: a slot says which trainer wrote it, and the other trainer refuses it by name.
TEST(Checkpointer, ASlotOfTheOtherTrainerIsRefusedNamingBoth) {
  test::TempDir d;
  const auto run = d.path().string();
  auto single = make_single_rank();
  CheckpointParts parts;
  parts.trainer = "vdt train causal", parts.step = 3, parts.replicated = true;
  parts.update = {{{"blocks.0.q.lora_A.weight", torch::ones({2, 4})}},
                  {{"exp_avg.blocks.0.q.lora_A.weight", torch::zeros({2, 4})}},
                  {}};
  parts.train_state = {{"samples_seen", 6}};
  parts.config_json = R"({"out": "x"})";
  const auto slot = save_checkpoint(run, "", parts, *single);
  EXPECT_TRUE(fs::exists(slot + "/config.json"));
  const auto ck = load_checkpoint(run, false, "vdt train causal");
  ASSERT_TRUE(ck.has_value());
  EXPECT_EQ(ck->train_state["step"], 3);
  EXPECT_EQ(ck->train_state["samples_seen"], 6);
  EXPECT_TRUE(torch::equal(ck->full("weight", "blocks.0.q.lora_A.weight"), torch::ones({2, 4})));
  test::expect_error([&] { load_trainer_state(run, false); },
                     {"vdt train causal", "vdt train sft", "trainer_state.json"});
}

}  // namespace
}  // namespace vdt
