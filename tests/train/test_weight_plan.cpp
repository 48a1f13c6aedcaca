// The memory plan's weight choices (train/plan/weight_plan.h) on a made-up table: a budget that holds the base streams
// nothing; smaller ones stream more blocks and take longer; --base-dtype auto turns FP8 on only when no bf16 plan fits,
// and says so; a budget nothing meets is refused with the smallest budget that works (which does work); streaming is
// refused for full-parameter training.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>

#include "core/error.h"
#include "test_util.h"
#include "train/plan/weight_plan.h"

namespace vdt {
namespace {

constexpr double kGiB = double(int64_t{1} << 30);
int64_t gib(double g) { return static_cast<int64_t>(g * kGiB); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A LoRA's block-causal rows: block checkpointing keeps 0.1 GiB a block, selective 0.6 (and is faster).
CostTable lora_table() {
  CostTable t;
  t.preset = "made-up", t.card = "test-card", t.source = "made-up table";
  for (const char* mode : {"block", "selective"}) {
    CostRow r;
    r.key = {"lora", mode, "prefix", false, 0};
    r.rows = 8192, r.kept_bytes = (mode[0] == 'b' ? 0.02 : 0.6) * kGiB, r.transient_bytes = 0.5 * kGiB;
    r.seconds = mode[0] == 'b' ? 0.05 : 0.04, r.outside_seconds = 0.01;
    t.rows.push_back(r);
  }
  t.copy.h2d_bytes_per_second = 20e9, t.copy.overlap = 0.9, t.copy.dequant_bytes_per_second = 1e12;
  return t;
}

// 40 blocks of 1 GiB each (0.52 GiB as FP8) beside 2 GiB of everything else.
BlockWeights weights() { return {40, gib(1), gib(0.52), true}; }

PlanRequest request(double budget_gib, const PlanChoices& given = {}) {
  PlanRequest r;
  r.given = given;
  r.budget_bytes = gib(budget_gib);
  r.fixed.static_bytes = gib(2) + 40 * gib(1);
  r.blocks = 40, r.rows = 8192, r.training = "lora", r.causal = true, r.allow_none = false;
  r.given.attn = CausalKernel::prefix;
  return r;
}

TEST(WeightPlan, StreamsMoreBlocksAsTheBudgetShrinks) {
  WeightPlan wp;
  const auto roomy = make_weight_plan(request(80), weights(), lora_table(), &wp);
  EXPECT_EQ(wp.streamed_blocks, 0);
  EXPECT_FALSE(wp.fp8_base);
  EXPECT_EQ(wp.host_bytes, 0);
  int64_t last_streamed = 0;
  double last_seconds = roomy.step_seconds;
  for (double budget : {40.0, 32.0, 24.0, 16.0}) {
    const auto p = make_weight_plan(request(budget), weights(), lora_table(), &wp);
    EXPECT_GE(wp.streamed_blocks, last_streamed) << budget;
    EXPECT_GE(p.step_seconds, last_seconds - 1e-12) << budget;
    EXPECT_LE(p.peak_bytes + p.margin_bytes, gib(budget)) << budget;
    EXPECT_EQ(wp.host_bytes, wp.streamed_blocks * gib(1));
    EXPECT_GE(p.host_bytes, wp.host_bytes);
    EXPECT_FALSE(wp.fp8_base) << budget;  // --base-dtype bf16 (the default)
    last_streamed = wp.streamed_blocks, last_seconds = p.step_seconds;
  }
  EXPECT_GT(last_streamed, 20);
  const auto lines = make_weight_plan(request(24), weights(), lora_table(), &wp).table_lines();
  bool shown = false;
  for (const auto& l : lines) shown = shown || l.find("--stream-blocks") != std::string::npos;
  EXPECT_TRUE(shown);
}

TEST(WeightPlan, AutoTurnsFp8OnOnlyWhenBf16CannotFitAndSaysSo) {
  WeightPlan wp;
  make_weight_plan(request(24, {.base_dtype = BaseDtype::automatic}), weights(), lora_table(), &wp);
  EXPECT_FALSE(wp.fp8_base);  // bf16 with streaming fits
  // 5.6 GiB: bf16 needs at least the 2 GiB rest and two whole blocks and the activations; FP8 streams half the bytes
  const auto p = make_weight_plan(request(5.6, {.base_dtype = BaseDtype::automatic}), weights(), lora_table(), &wp);
  EXPECT_TRUE(wp.fp8_base);
  EXPECT_TRUE(wp.fp8_because_bf16_cannot);
  std::string base_line;
  for (const auto& l : p.table_lines())
    if (l.find("--base-dtype") != std::string::npos) base_line = l;
  EXPECT_NE(base_line.find("AUTO CHOSE FP8"), std::string::npos) << base_line;
  // bf16 alone at that budget: refused
  EXPECT_NE(error_of([&] {
              make_weight_plan(request(5.6), weights(), lora_table(), nullptr);
            }).find("--base-dtype fp8 or auto"),
            std::string::npos);
}

TEST(WeightPlan, ARefusedBudgetNamesTheSmallestThatWorks) {
  const auto msg = error_of([&] { make_weight_plan(request(2), weights(), lora_table(), nullptr); });
  const auto at = msg.find("the smallest budget that works: ");
  ASSERT_NE(at, std::string::npos) << msg;
  const double smallest = std::stod(msg.substr(at + 32));
  EXPECT_NE(msg.find("40 of 40 blocks streamed"), std::string::npos) << msg;
  EXPECT_NO_THROW(make_weight_plan(request(smallest), weights(), lora_table(), nullptr));
  EXPECT_THROW(make_weight_plan(request(smallest - 0.1), weights(), lora_table(), nullptr), Error);
  // given a count, the smallest budget is for that count
  const auto given =
      error_of([&] { make_weight_plan(request(2, {.stream_blocks = 4}), weights(), lora_table(), nullptr); });
  EXPECT_NE(given.find("4 of 40 blocks streamed"), std::string::npos) << given;
}

TEST(WeightPlan, FullTrainingKeepsItsWeightsOnTheGpu) {
  BlockWeights full = weights();
  full.streamable = false;
  WeightPlan wp;
  make_weight_plan(request(80), full, lora_table(), &wp);
  EXPECT_EQ(wp.streamed_blocks, 0);
  EXPECT_NE(error_of([&] {
              make_weight_plan(request(80, {.stream_blocks = 3}), full, lora_table(), nullptr);
            }).find("full-parameter training keeps its weights on the GPU"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_weight_plan(request(80, {.stream_blocks = 41}), weights(), lora_table(), nullptr);
            }).find("--stream-blocks 41"),
            std::string::npos);
}

TEST(WeightPlan, ABudgetAboveTheCardIsClampedToAuto) {
  std::string note;
  const int64_t h100 = static_cast<int64_t>(79.2 * kGiB);  // an "80 GB" H100
  EXPECT_EQ(clamp_budget(gib(80), h100, "NVIDIA H100 80GB HBM3", &note), auto_budget_bytes(h100));
  EXPECT_NE(note.find("--memory 80.0 is more than this NVIDIA H100 80GB HBM3 offers"), std::string::npos) << note;
  EXPECT_NE(note.find("planned for 76.8 GiB, as auto"), std::string::npos) << note;
  note.clear();
  EXPECT_EQ(clamp_budget(gib(48), h100, "NVIDIA H100 80GB HBM3", &note), gib(48));
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(clamp_budget(gib(500), 0, "cpu", &note), gib(500));  // no device memory known: as given
}

// The table's "copy": written and read back; a table without it takes the defaults; a bad value names the key.
TEST(WeightPlan, TheCostTableKeepsItsCopyCosts) {
  test::TempDir dir;
  auto t = lora_table();
  t.preset = "made-up", t.card = "test-card";
  t.copy.measured = true;
  save_cost_table(t, dir.file("t.json"));
  const auto back = load_cost_table(dir.file("t.json"));
  EXPECT_TRUE(back.copy.measured);
  EXPECT_DOUBLE_EQ(back.copy.h2d_bytes_per_second, 20e9);
  EXPECT_DOUBLE_EQ(back.copy.overlap, 0.9);
  t.copy = CopyCosts{};
  save_cost_table(t, dir.file("u.json"));
  const auto plain = load_cost_table(dir.file("u.json"));
  EXPECT_FALSE(plain.copy.measured);
  EXPECT_DOUBLE_EQ(plain.copy.h2d_bytes_per_second, CopyCosts::kDefaultH2d);
  // merged: a table measured without copy costs keeps the file's
  EXPECT_DOUBLE_EQ(merge_cost_tables(back, plain).copy.overlap, 0.9);
  std::string text;
  {
    std::ifstream f(dir.file("t.json"));
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  const std::string good = "\"overlap\": 0.9";
  const auto at = text.find(good);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, good.size(), "\"overlap\": 1.5");
  std::ofstream(dir.file("bad.json")) << text;
  const auto msg = error_of([&] { load_cost_table(dir.file("bad.json")); });
  EXPECT_NE(msg.find("bad.json: copy: key 'overlap'"), std::string::npos) << msg;
}

TEST(WeightPlan, CopiesCostWhatTheyCannotHide) {
  const BlockWeights w = weights();
  CopyCosts c;
  c.h2d_bytes_per_second = kGiB, c.overlap = 1, c.dequant_bytes_per_second = 1e30;
  // one copy a second; 10 s of blocks: a third forward, two thirds backward
  EXPECT_DOUBLE_EQ(weight_seconds(w, 0, 1, false, 10, c), 0);
  EXPECT_NEAR(weight_seconds(w, 2, 1, false, 9, c), 0, 1e-9);      // 2 s of copies under 3 s and 6 s
  EXPECT_NEAR(weight_seconds(w, 5, 2, false, 9, c), 2 + 0, 1e-9);  // 5 s under 3 s: 2 s show
  c.overlap = 0;
  EXPECT_NEAR(weight_seconds(w, 2, 1, false, 9, c), 4, 1e-9);  // nothing hides
  EXPECT_EQ(weight_device_bytes(w, 0, 1, false), 40 * gib(1));
  EXPECT_EQ(weight_device_bytes(w, 10, 2, false), 30 * gib(1) + 3 * gib(1));
  EXPECT_EQ(weight_device_bytes(w, 0, 1, true), 40 * gib(0.52) + gib(1));
}

}  // namespace
}  // namespace vdt
