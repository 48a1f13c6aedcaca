// Helpers of the causal trainer's tests (Wan and H3 bases): logs, LoRA comparison, two in-process ranks, a run cut
// before its last save.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "distributed/local_group.h"
#include "train/causal/causal_trainer.h"
#include "train/checkpoint/lora_checkpoint.h"

namespace vdt {
namespace test {

namespace fs = std::filesystem;

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
  run_local_ranks(world, [&](Communicator& comm) {
    auto s = train_causal(c, comm, 0);
    std::lock_guard<std::mutex> lk(mu);
    out[static_cast<size_t>(comm.rank())] = s;
  }, local_world);
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

}  // namespace test
}  // namespace vdt
