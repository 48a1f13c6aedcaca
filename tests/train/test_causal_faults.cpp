// The causal trainer's saves under kill -9 (docs/design.md §8, docs/causal.md): a real `vdt train causal` killed at
// every fault point of every save (core/fault.h), then re-run with the same command, ends with the LoRA file and the
// log of an uninterrupted run, bit for bit — the state slot and the LoRA file of a step are one unit, so a re-run
// continues exactly from the newest sealed slot (writing its LoRA file when the kill came between the two), never from
// a LoRA file with fresh moments.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/causal_test_util.h"
#include "train/checkpoint/lora_checkpoint.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> causal_args(const std::string& data, const std::string& out, int64_t steps) {
  return {"train",
          "causal",
          "--random-init",
          "--data-root",
          data,
          "--out",
          out,
          "--model",
          "tiny",
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
          "1",
          "--save-every",
          "1",
          "--steps",
          std::to_string(steps)};
}

void expect_same_file_tensors(const std::string& a, const std::string& b) {
  ASSERT_TRUE(fs::exists(b)) << b;
  auto fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  ASSERT_EQ(fa->keys(), fb->keys());
  for (const auto& k : fa->keys()) EXPECT_TRUE(torch::equal(fa->get(k), fb->get(k))) << k << ": " << b;
}

std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) out.push_back(e.path().string());
  return out;
}

TEST(CausalFaults, KilledAtEveryPointOfEverySaveTheRerunEndsAsTheUninterruptedRun) {
  test::TempDir dir;
  SynthConfig sc;
  sc.out = dir.file("data"), sc.latent_frames = 14, sc.train_runs = 2, sc.train_clips_per_run = 2, sc.n_drop = 0;
  synth_root(sc);
  const auto data = dir.file("data");
  constexpr int64_t kSteps = 2;
  ASSERT_EQ(test::spawn_vdt(causal_args(data, dir.file("ref"), kSteps), {}), 0);
  const auto trace = dir.file("trace.log");
  ASSERT_EQ(test::spawn_vdt(causal_args(data, dir.file("trace"), kSteps), {"VDT_FAULT_TRACE=1"}, nullptr, trace), 0);
  std::ifstream tf(trace);
  std::vector<std::string> points;
  for (std::string line; std::getline(tf, line);)
    if (line.rfind("[fault] point ", 0) == 0) points.push_back(line.substr(line.find(": ") + 2));
  ASSERT_GT(points.size(), kSteps * 8u);  // every save: a slot (two tensor files, JSON, seal, link) and a LoRA file
  const auto ref_lora = lora_step_path(dir.file("ref"), kSteps);
  const auto ref_log = test::log_without_time(dir.file("ref") + "/train_log.jsonl");
  for (size_t k = 1; k <= points.size(); ++k) {
    SCOPED_TRACE("killed at point " + std::to_string(k) + ": " + points[k - 1]);
    const auto out = dir.file("kill" + std::to_string(k));
    const int status = test::spawn_vdt(causal_args(data, out, kSteps), {"VDT_FAULT_KILL_AT=" + std::to_string(k)});
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    const int again = test::spawn_vdt(causal_args(data, out, kSteps), {}, nullptr, dir.file("rerun.log"));
    ASSERT_TRUE(WIFEXITED(again) && WEXITSTATUS(again) == 0) << again;
    expect_same_file_tensors(ref_lora, lora_step_path(out, kSteps));
    EXPECT_EQ(ref_log, test::log_without_time(out + "/train_log.jsonl"));
    std::ifstream rl(dir.file("rerun.log"));
    const std::string rerun((std::istreambuf_iterator<char>(rl)), std::istreambuf_iterator<char>());
    EXPECT_EQ(rerun.find("afresh"), std::string::npos) << rerun;  // never the Python trainer's fresh-moment resume
    EXPECT_EQ(temp_files(out), std::vector<std::string>{});       // the interrupted save's temp files are gone
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace vdt
