// What the causal trainer's tests share (Wan and H3 bases): the synthetic roots and the flags of a short run, logs,
// LoRA comparison, two in-process ranks, a run cut before its last save and the check that it resumes exactly.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <utility>
#include <nlohmann/json.hpp>

#include "distributed/local_group.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"
#include "train/checkpoint/lora_checkpoint.h"

namespace vdt {
namespace test {

namespace fs = std::filesystem;

// A root of 14-latent Wan streams at the tiny preset's widths: 9 train clips in 3 runs (1 flagged) + 4 val clips,
// 12 usable streams of 2 windows each in spans of 6 one-frame chunks.
inline SynthConfig wan_causal_root(const std::string& out) {
  SynthConfig sc;
  sc.out = out, sc.latent_frames = 14, sc.train_runs = 3, sc.train_clips_per_run = 3, sc.n_drop = 1;
  return sc;
}

// A MiniMax-H3 root at h3-tiny's widths (Picture 1, the silent audio, token tags): clips of 32 latents at 4x4, one
// 30-latent window each (6 one-clip chunks), `train_runs` runs of 2 train clips and 1 run of val clips.
inline SynthConfig h3_causal_root(const std::string& out, int64_t train_runs) {
  SynthConfig sc;
  sc.out = out, sc.model = "h3", sc.latent_channels = 24, sc.text_dim = 48, sc.latent_frames = 32;
  sc.latent_h = 4, sc.latent_w = 4, sc.train_runs = train_runs, sc.train_clips_per_run = 2, sc.val_runs = 1;
  return sc;
}

// The flags of a short run on `root` into `out`: a random `model` base on the CPU in fp32, chunks of `chunk_frames`
// (0: the base's natural chunk), a rank-4 LoRA with alpha 4, `steps` steps saving every 4, 3 val clips, the learning
// rate from 1e-2 down to 1e-4 after 2 warm-up steps.
inline CausalConfig causal_test_run(const std::string& root, const std::string& out, const std::string& model,
                                    int64_t chunk_frames, int64_t steps) {
  CausalConfig c;
  c.data_root = root, c.out = out;
  c.model = model, c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32",
  c.chunk_frames = chunk_frames;
  c.lora_rank = 4, c.lora_alpha = 4;
  c.steps = steps, c.save_every = 4, c.val_clips = 3, c.lr = 1e-2, c.lr_min = 1e-4, c.warmup = 2;
  return c;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Everything a step logs but the wall clock.
inline std::vector<nlohmann::json> log_without_time(const std::string& path) {
  auto rows = read_jsonl(path);
  for (auto& r : rows) r.erase("sec");
  return rows;
}

inline void expect_same_lora(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

// Every rank's summary of one run with `world` in-process ranks in nodes of `local_world` (0: one node).
inline std::vector<CausalSummary> run_ranks(const CausalConfig& c, int world, int local_world = 0) {
  std::vector<CausalSummary> out(static_cast<size_t>(world));
  std::mutex mu;
  run_local_ranks(
      world,
      [&](Communicator& comm) {
        auto s = train_causal(c, comm, 0);
        std::lock_guard<std::mutex> lk(mu);
        out[static_cast<size_t>(comm.rank())] = s;
      },
      local_world);
  return out;
}
inline std::vector<CausalSummary> run_two_ranks(const CausalConfig& c) { return run_ranks(c, 2); }

// `to` as a run in `from` looked before its last save (that LoRA file and the slot written with it never happened).
inline void copy_before_last_save(const std::string& from, const std::string& to, int64_t last_step) {
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove(lora_step_path(to, last_step));
  fs::remove_all(to + "/" + fs::read_symlink(to + "/state").string());
  fs::remove(to + "/state");
}

// `full` run to its end, and `cut` (the same flags, another --out) holding `full`'s directory as it was before the
// last save, re-run: it continues exactly from the state slot at `start_step` and ends with the same LoRA. Returns
// the runs' summaries (full, cut).
inline std::pair<CausalSummary, CausalSummary> expect_exact_resume(const CausalConfig& full, const CausalConfig& cut,
                                                                   int64_t start_step) {
  const auto ref = train_causal(full);
  copy_before_last_save(full.out, cut.out, full.steps);
  const auto resumed = train_causal(cut);
  EXPECT_EQ(resumed.start_step, start_step);
  EXPECT_NE(resumed.resume_how.find("exact"), std::string::npos) << resumed.resume_how;
  expect_same_lora(ref.lora, resumed.lora);
  return {ref, resumed};
}

}  // namespace test
}  // namespace vdt
