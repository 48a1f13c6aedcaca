// The run directory and start-up: restarts that forget nothing (every sealed slot corrupt is an error, the
// newest sealed slot wins over a stale `state` link and the link is repaired, a fresh start moves an earlier run's
// logs aside), one run per directory (a lock naming the holder), leftovers of interrupted saves removed (only ours),
// bad input refused before the first step (a `state` that is not a link, a leak whatever the validation flags,
// flags), signals during start-up, a file-size limit, and messages that name the file.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "core/state_slots.h"
#include "core/stop_signal.h"
#include "model/wan_dit.h"
#include "model/weights_io.h"
#include "test_util.h"
#include "tools/ckpt.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"
#include "train/checkpoint/lora_checkpoint.h"
#include "train/loop/run_dir.h"
#include "train/loop/run_log.h"
#include "train/sft/sft_trainer.h"
#include "train/sft_test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

class Reliability : public test::SftSuiteTest<Reliability> {
 protected:
  static SftConfig config(const std::string& name, int64_t steps) {
    auto c = run_config(name, steps);
    c.grad_accum = 2, c.val_every = 0;
    return c;
  }
  static size_t rows(const std::string& csv) { return test::read_csv(csv).size(); }
  static void flip_byte(const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-100, std::ios::end);
    f.put(static_cast<char>(c ^ 0x55));
  }
};

TEST_F(Reliability, EverySealedSlotCorruptIsAnErrorListingThemUnlessStartingFreshOnPurpose) {
  auto c = config("all_corrupt", 4);  // slots at steps 2 and 4
  train_sft(c);
  for (const char* s : {"state_A", "state_B"}) flip_byte(c.output + "/" + s + "/weights-00000-of-00001.safetensors");
  c.resume = "auto", c.max_steps = 6;
  test::expect_error([&] { train_sft(c); },
                     {"every sealed state slot is corrupt", "state_A", "state_B", "CRC-32", "--ignore_corrupt_state"});
  EXPECT_EQ(rows(c.output + "/train_log.csv"), 4u);  // nothing was appended
  c.ignore_corrupt_state = true;
  const auto s = train_sft(c);
  EXPECT_EQ(s.start_step, 0);
  EXPECT_EQ(rows(c.output + "/train_log.csv"), 6u);       // this run's rows only
  EXPECT_EQ(rows(c.output + "/train_log.old0.csv"), 4u);  // the earlier run's, moved aside
}

// A run killed before its first complete state, restarted with --resume auto, starts at step 0 and must not append
// its rows to the killed attempt's.
TEST_F(Reliability, AFreshStartMovesAnEarlierRunsLogsAside) {
  auto c = config("fresh_again", 3);
  c.save_state = false;
  train_sft(c);
  ASSERT_EQ(rows(c.output + "/train_log.csv"), 3u);
  c.save_state = true, c.resume = "auto";
  EXPECT_EQ(train_sft(c).start_step, 0);
  EXPECT_EQ(rows(c.output + "/train_log.csv"), 3u);
  EXPECT_EQ(rows(c.output + "/train_log.old0.csv"), 3u);
}

// A kill between sealing a slot and moving the link leaves `state` one save behind: the newest sealed slot wins
// (--resume RUN and --resume RUN/state agree), the link is repaired, and a finished run writes its done.json.
TEST_F(Reliability, TheNewestSealedSlotWinsOverAStaleLinkWhichIsRepaired) {
  auto c = config("stale_link", 4);
  train_sft(c);
  ASSERT_EQ(fs::read_symlink(c.output + "/state").string(), "state_B");
  fs::remove(c.output + "/state");
  fs::create_symlink("state_A", c.output + "/state");  // as the kill left it
  fs::remove(c.output + "/done.json");
  EXPECT_EQ(find_slot(c.output + "/state", nullptr)->info["step"], 4);
  EXPECT_EQ(find_slot(c.output, nullptr)->info["step"], 4);
  c.resume = c.output + "/state";
  const auto s = train_sft(c);
  EXPECT_EQ(s.start_step, 4);
  EXPECT_EQ(fs::read_symlink(c.output + "/state").string(), "state_B");
  EXPECT_TRUE(fs::exists(c.output + "/done.json"));
  EXPECT_EQ(rows(c.output + "/train_log.csv"), 4u);
}

TEST_F(Reliability, AStateThatIsARegularFileIsRefusedBeforeTheFirstStep) {
  auto c = config("state_file", 2);
  fs::create_directories(c.output);
  std::ofstream(c.output + "/state") << "copied by hand";
  test::expect_error([&] { train_sft(c); }, {c.output + "/state", "not a link", "regular file", "move it away"});
  EXPECT_FALSE(fs::exists(c.output + "/train_log.csv"));
}

TEST_F(Reliability, TwoRunsInOneDirectoryTheSecondIsRefusedNamingTheFirst) {
  auto c = config("locked", 2);
  {
    RunDirLock held(c.output, "--output");  // another run in this directory (this test process)
    test::expect_error([&] { train_sft(c); },
                       {"--output", c.output, "in use by another vdt process", "pid " + std::to_string(::getpid())});
    auto k = CausalConfig{};
    k.data_root = dir_->file("data"), k.out = c.output, k.model = "tiny", k.compute.device = "cpu", k.steps = 1;
    k.random_init = true;
    test::expect_error([&] { train_causal(k); }, {"--out", "in use by another vdt process"});
  }
  EXPECT_EQ(train_sft(c).steps, 2);  // released: the run goes ahead
}

TEST_F(Reliability, LeftoversOfInterruptedSavesAreRemovedAndOnlyOurs) {
  auto c = config("leftovers", 2);
  train_sft(c);
  const std::vector<std::string> ours = {"step-4.safetensors.tmp.4242", "train_log.csv.tmp.17", "config.json.tmp.9",
                                         "state_A/optimizer-00000-of-00001.safetensors.tmp.4242"};
  const std::vector<std::string> theirs = {"notes.txt.tmp.4242", "step-4.safetensors.tmp.x", "my.safetensors.tmp.3",
                                           "step-4.safetensors.tmp"};
  for (const auto& f : ours) std::ofstream(c.output + "/" + f) << std::string(1000, 'x');
  for (const auto& f : theirs) std::ofstream(c.output + "/" + f) << "keep";
  const auto removed = remove_leftovers(c.output);
  EXPECT_EQ(removed.size(), ours.size());
  for (const auto& f : ours) EXPECT_FALSE(fs::exists(c.output + "/" + f)) << f;
  for (const auto& f : theirs) EXPECT_TRUE(fs::exists(c.output + "/" + f)) << f;
  EXPECT_NE(describe_leftovers(removed).find("removed 4 temp files"), std::string::npos) << describe_leftovers(removed);
  // At start-up, through the binary: the line says what went.
  std::ofstream(c.output + "/step-6.safetensors.tmp.31337") << std::string(5000, 'x');
  const auto r =
      test::run_vdt("train sft --random-init --data_root " + c.data_root + " --res " + res_ + " --output " + c.output +
                    " --model tiny --device cpu --precision fp32 --resume auto --max_steps 2 --val_every 0");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("removed 1 temp file left by an interrupted save"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(c.output + "/step-6.safetensors.tmp.31337"));
}

// The leak check covers the whole index whatever --val_every / --val_n (the docs say a leak aborts).
TEST_F(Reliability, ALeakAbortsWhateverTheValidationFlags) {
  const auto data = dir_->file("leaky");
  fs::copy(dir_->file("data"), data, fs::copy_options::recursive);
  std::ifstream in(data + "/index/clips.jsonl");
  std::string out, line, train_run;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["split"] == "train" && train_run.empty()) train_run = j["run"];
    if (j["split"] == "val") j["run"] = train_run;
    out += j.dump() + "\n";
  }
  in.close();
  std::ofstream(data + "/index/clips.jsonl") << out;
  for (auto [every, n] : {std::pair<int64_t, int64_t>{0, 16}, {500, 0}}) {
    auto c = config("leak", 1);
    c.data_root = data, c.val_every = every, c.val_n = n;
    test::expect_error([&] { train_sft(c); }, {"clips.jsonl", "leak", "'" + train_run + "'"});
  }
}

TEST(ReliabilityFlags, NoFlagIsAcceptedSilently) {
  SftConfig c;
  c.random_init = true;
  c.data_root = "d", c.output = "o";
  c.validate();
  c.grad_clip = 0;  // documented: no clipping
  c.validate();
  for (double bad : {-1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    c.grad_clip = bad;
    test::expect_error([&] { c.validate(); }, {"--grad_clip", "0 turns clipping off"});
  }
  c.grad_clip = 1;
  c.sem_hidden = -5;
  test::expect_error([&] { c.validate(); }, {"--sem_hidden -5", ">= 1"});
  c.sem_hidden = 0;
  c.val_timesteps = "200abc";
  test::expect_error([&] { c.validate(); }, {"--val_timesteps", "'200abc'", "not a number"});
  c.val_timesteps = "200, 500 ,800";
  EXPECT_EQ(c.val_timestep_list(), (std::vector<double>{200, 500, 800}));
  // Usage errors exit 2 (docs/cli.md), whatever CLI11's own code for them.
  for (const char* args : {"train sft --bogus 1", "train sft --output o", "sample --n 0 --data_root d --out o",
                           "data check", "train causal --steps abc --out o --data-root d"}) {
    const auto r = test::run_vdt(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
  }
  EXPECT_EQ(test::run_vdt("train sft --help").code, 0);
}

TEST(ReliabilityMessages, ALoraFileNameWhoseStepOverflowsIsNamed) {
  test::TempDir d;
  std::ofstream(d.file("lora_step99999999999999999999999.safetensors")) << "x";
  test::expect_error([&] { newest_lora_step(d.path().string()); },
                     {"lora_step99999999999999999999999.safetensors", "64-bit"});
}

TEST(ReliabilityMessages, CkptCheckComparesShapesWithThePreset) {
  test::TempDir d;
  WanDiT m(preset_config("tiny"));
  m->init_weights(0);
  auto w = named_parameters(*m);
  const auto path = d.file("tiny.safetensors");
  save_safetensors(path, w);
  EXPECT_TRUE(check_ckpt(SafetensorsSet::open({path}), "tiny").empty());
  for (auto& [k, t] : w)
    if (k == "blocks.0.ffn.0.weight") t = t.t().contiguous();
  save_safetensors(path, w);
  const auto problems = check_ckpt(SafetensorsSet::open({path}), "tiny");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("blocks.0.ffn.0.weight"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("transposed"), std::string::npos) << problems[0];
}

TEST(ReliabilityMessages, NanWeightsAreBlamedOnTheWeightsFile) {
  test::TempDir d;
  WanDiT m(preset_config("tiny"));
  m->init_weights(0);
  auto w = named_parameters(*m);
  for (auto& [k, t] : w)
    if (k == "blocks.1.self_attn.q.weight") t = t.clone(), t[0][0] = NAN;
  save_safetensors(d.file("nan.safetensors"), w);
  WanDiT fresh(preset_config("tiny"));
  test::expect_error([&] { load_weights(*fresh, SafetensorsSet::open({d.file("nan.safetensors")})); },
                     {"nan.safetensors", "NaN/Inf", "blocks.1.self_attn.q.weight", "1 values"});
}

TEST(ReliabilityMessages, SmallGradientNormsPrintReadably) {
  EXPECT_EQ(fmt_gnorm(3e-5), "3e-05");
  EXPECT_EQ(fmt_gnorm(1.23456), "1.235");
  EXPECT_EQ(fmt_gnorm(0), "0");
}

// A signal during start-up (held from `main` on for `vdt train`) stops the trainer before its first step, exit 0,
// instead of killing the process with 143 / 130.
TEST_F(Reliability, ASignalDuringStartUpStopsBeforeTheFirstStep) {
  auto c = config("early_signal", 3);
  {
    StopOnSignal held;  // main's
    ::raise(SIGTERM);
    const auto s = train_sft(c);
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.steps, 0);
  }
  EXPECT_FALSE(fs::exists(c.output + "/step-2.safetensors"));
  EXPECT_EQ(rows(c.output + "/train_log.csv"), 0u);
  // Through the binary: SIGTERM as soon as the run holds its directory, long before the first step ends.
  const auto out = dir_->file("early_signal_cli");
  pid_t pid = 0;
  test::spawn_vdt({"train", "sft", "--random-init", "--data_root", dir_->file("data"), "--res", res_, "--output", out,
                   "--model", "tiny", "--device", "cpu", "--precision", "fp32", "--max_steps", "3"},
                  {}, &pid);
  for (int i = 0; i < 20000 && !fs::exists(out + "/" + RunDirLock::kFile); ++i) ::usleep(500);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// `vdt train` holds SIGTERM / SIGINT before any library's static initialisers run (cli/early_stop.cpp): the binary
// carries the .preinit_array entry, and a SIGTERM sent as soon as the process catches it (long before LibTorch has
// loaded and `main` runs) ends the run cleanly, exit 0, with nothing written.
TEST_F(Reliability, ASignalWhileLibrariesLoadStopsCleanly) {
  const auto sections = test::run_command("readelf -S --wide " + std::string(VDT_BINARY) + " 2>&1");
  if (sections.code == 127) GTEST_SKIP() << "no readelf";
  EXPECT_NE(sections.output.find(".preinit_array"), std::string::npos) << sections.output;
  const auto out = dir_->file("signal_at_load");
  pid_t pid = 0;
  test::spawn_vdt({"train", "sft", "--random-init", "--data_root", dir_->file("data"), "--res", res_, "--output", out,
                   "--model", "tiny", "--device", "cpu", "--precision", "fp32", "--max_steps", "3"},
                  {}, &pid);
  // SigCgt in /proc/<pid>/status: the signals the process catches (SIGTERM is bit 15 - 1).
  auto catches_term = [&] {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1;
    return 0ull;
  };
  for (int i = 0; i < 200000 && !catches_term(); ++i) ::usleep(50);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(rows(out + "/train_log.csv"), 0u);
}

// Over a file-size limit a save fails with EFBIG, reported like a full disk, instead of SIGXFSZ killing vdt silently.
TEST_F(Reliability, AFileSizeLimitIsReportedLikeAFullDisk) {
  const auto out = dir_->file("fsize");
  const std::string cmd = "sh -c 'ulimit -f 64; exec " + std::string(VDT_BINARY) +
                          " train sft --random-init --data_root " + dir_->file("data") + " --res " + res_ +
                          " --output " + out +
                          " --model tiny --device cpu "
                          "--precision fp32 --max_steps 2 --save_every 1 --val_every 0 --num_workers 1' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 2) << output;
  EXPECT_NE(output.find("File too large"), std::string::npos) << output;
}

}  // namespace
}  // namespace vdt
