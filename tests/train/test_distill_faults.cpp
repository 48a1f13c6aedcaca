// `vdt train distill`'s saves under kill -9 (docs/distill.md "Resume"): a real run killed at every fault point of
// every save (core/fault.h), then re-run with the same command, ends with the uninterrupted run's student LoRA, its
// EMA and its log, bit for bit: the state slot (both LoRAs, both AdamW states, the EMA) and the LoRA files of a step
// are one unit.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/causal_test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> distill_args(const std::string& data, const std::string& out) {
  return {"train",
          "distill",
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
          "--chunks",
          "2",
          "--lora-rank",
          "4",
          "--lora-alpha",
          "4",
          "--val-clips",
          "1",
          "--lr",
          "1e-3",
          "--critic-lr",
          "1e-3",
          "--critic-ratio",
          "1",
          "--ema",
          "0.5",
          "--ema-start",
          "1",
          "--save-every",
          "1",
          "--steps",
          "2"};
}

void expect_same_file_tensors(const std::string& a, const std::string& b) {
  ASSERT_TRUE(fs::exists(b)) << b;
  auto fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  ASSERT_EQ(fa->keys(), fb->keys());
  for (const auto& k : fa->keys()) EXPECT_TRUE(torch::equal(fa->get(k), fb->get(k))) << k << ": " << b;
}

TEST(DistillFaults, KilledAtEveryPointOfEverySaveTheRerunEndsAsTheUninterruptedRun) {
  test::TempDir dir;
  SynthConfig sc;
  sc.out = dir.file("data"), sc.latent_frames = 6, sc.train_runs = 1, sc.train_clips_per_run = 2, sc.n_drop = 0;
  synth_root(sc);
  const auto data = dir.file("data");
  ASSERT_EQ(test::spawn_vdt(distill_args(data, dir.file("ref")), {}), 0);
  const auto trace = dir.file("trace.log");
  ASSERT_EQ(test::spawn_vdt(distill_args(data, dir.file("trace")), {"VDT_FAULT_TRACE=1"}, nullptr, trace), 0);
  std::ifstream tf(trace);
  std::vector<std::string> points;
  for (std::string line; std::getline(tf, line);)
    if (line.rfind("[fault] point ", 0) == 0) points.push_back(line.substr(line.find(": ") + 2));
  ASSERT_GT(points.size(), 2 * 8u);  // every save: a slot (two tensor files, JSON, seal, link) and two LoRA files
  const auto ref_rows = test::read_csv(dir.file("ref") + "/train_log.csv", {"sec"});
  for (size_t k = 1; k <= points.size(); ++k) {
    SCOPED_TRACE("killed at point " + std::to_string(k) + ": " + points[k - 1]);
    const auto out = dir.file("kill" + std::to_string(k));
    const int status = test::spawn_vdt(distill_args(data, out), {"VDT_FAULT_KILL_AT=" + std::to_string(k)});
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    const int again = test::spawn_vdt(distill_args(data, out), {}, nullptr, dir.file("rerun.log"));
    ASSERT_TRUE(WIFEXITED(again) && WEXITSTATUS(again) == 0) << again;
    for (const char* f : {"/lora_step00002.safetensors", "/lora_step00002_ema.safetensors"})
      expect_same_file_tensors(dir.file("ref") + f, out + f);
    EXPECT_EQ(ref_rows, test::read_csv(out + "/train_log.csv", {"sec"}));
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace vdt
