// The memory planner (train/plan/memory_plan.h) on made-up cost tables: what it picks as the budget grows, that given
// flags win, the advice when nothing fits; the cost table's loader, interpolation and analytic estimate
// (train/plan/cost_table.h); and `bench plan`'s measurement on the tiny preset on the CPU (tools/plan_bench.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "core/error.h"
#include "model/denoiser_registry.h"
#include "test_util.h"
#include "tools/plan_bench.h"
#include "train/plan/cost_table.h"
#include "train/plan/memory_plan.h"

namespace vdt {
namespace {

constexpr double kGiB = double(int64_t{1} << 30);
int64_t gib(double g) { return static_cast<int64_t>(g * kGiB); }

CostRow row(const std::string& ckpt, int64_t rows, double kept_gib, double transient_gib, double seconds,
            const std::string& attn = "full", bool offload = false, double keep = 0, double host_gib = 0) {
  CostRow r;
  r.key = {"full", ckpt, attn, offload, keep};
  r.rows = rows, r.kept_bytes = kept_gib * kGiB, r.transient_bytes = transient_gib * kGiB, r.seconds = seconds;
  r.host_bytes = host_gib * kGiB, r.outside_seconds = 0.01;
  return r;
}

// Bidirectional, full training: none fastest and largest, selective nearly as fast, block slowest and smallest. The
// 4096-row values are half the 8192-row ones.
CostTable made_up_table() {
  CostTable t;
  t.preset = "made-up", t.card = "test-card", t.source = "made-up table";
  for (int64_t rows : {4096, 8192}) {
    const double s = rows / 8192.0;
    t.rows.push_back(row("none", rows, 3.0 * s, 1.0 * s, 0.0190 * s));
    t.rows.push_back(row("block", rows, 0.05 * s, 2.0 * s, 0.0250 * s));
    t.rows.push_back(row("selective", rows, 2.0 * s, 1.0 * s, 0.0195 * s));
  }
  return t;
}

PlanRequest request(double budget_gib) {
  PlanRequest r;
  r.budget_bytes = gib(budget_gib);
  r.fixed.static_bytes = gib(35);
  r.blocks = 30, r.rows = 8192;
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MemoryPlan, FortyGibPicksBlock) {
  const auto p = make_plan(request(40), made_up_table());
  EXPECT_EQ(p.knobs.checkpointing, Checkpointing::block);
  EXPECT_LE(p.peak_bytes + p.margin_bytes, gib(40));
  EXPECT_NEAR(p.peak_bytes, gib(35 + 1.5 + 2), 1 << 20);  // fixed + 30 kept inputs + one recompute
  EXPECT_NEAR(p.step_seconds, 30 * 0.025 + 0.01, 1e-9);
  const auto lines = p.table_lines();
  ASSERT_GE(lines.size(), 3u);
  EXPECT_NE(lines[1].find("--checkpointing"), std::string::npos);
  EXPECT_NE(lines[1].find("block"), std::string::npos);
  EXPECT_NE(lines.back().find("predicted step"), std::string::npos);
  // The knobs the plan does not choose go through as the request gives them.
  auto r = request(40);
  r.knobs.precision = Precision::fp32, r.knobs.fp8 = Fp8Mode::emulate;
  const auto q = make_plan(r, made_up_table());
  EXPECT_EQ(q.knobs.precision, Precision::fp32);
  EXPECT_EQ(q.knobs.fp8, Fp8Mode::emulate);
  EXPECT_EQ(q.flags(), "--checkpointing block");
}

// The peak a plan reports is the prediction alone; the margin is kept free beside it: a budget of exactly the
// prediction does not fit.
TEST(MemoryPlan, TheMarginIsKeptFreeBesideThePredictedPeak) {
  const auto p = make_plan(request(40), made_up_table());
  EXPECT_EQ(p.peak_bytes, p.fixed_bytes + p.activation_bytes + p.transient_bytes);
  EXPECT_GT(p.margin_bytes, int64_t{512} << 20);
  EXPECT_LE(p.peak_bytes + p.margin_bytes, gib(40));
  auto tight = request(40);
  tight.budget_bytes = p.peak_bytes;
  const auto msg = error_of([&] { make_plan(tight, made_up_table()); });
  EXPECT_NE(msg.find("nothing fits"), std::string::npos) << msg;
  EXPECT_NE(p.table_lines()[p.table_lines().size() - 2].find("with a margin of"), std::string::npos);
}

// A Wan block keeps its text keys and values per distinct caption: the plan adds text_row_bytes for each caption
// more than the table was measured with.
TEST(MemoryPlan, CaptionsAddTheirKeysAndValues) {
  auto t = made_up_table();
  for (auto& r : t.rows) r.text_rows = 1, r.text_row_bytes = r.key.checkpointing == "block" ? 0 : 0.05 * kGiB;
  auto r = request(200);
  r.given.checkpointing = Checkpointing::selective, r.given.selective_blocks = -1;
  const auto one = make_plan(r, t);
  r.text_rows = 5;
  const auto five = make_plan(r, t);
  EXPECT_NEAR(static_cast<double>(five.peak_bytes - one.peak_bytes), 30 * 4 * 0.05 * kGiB, 1e6);
  r.text_rows = 0;  // no cross-attention (or not known): as measured
  EXPECT_EQ(make_plan(r, t).peak_bytes, one.peak_bytes);
  // block checkpointing keeps only the block's input: no change
  r.given = {}, r.given.checkpointing = Checkpointing::block, r.text_rows = 5;
  auto r1 = r;
  r1.text_rows = 1;
  EXPECT_EQ(make_plan(r, t).peak_bytes, make_plan(r1, t).peak_bytes);
}

// One rank's fp32 gradient sums (--precision mixed, one micro batch) live from the end of backward to the step: the
// activations are gone by then, so the larger of the two counts, not their sum.
TEST(MemoryPlan, GradientSumsAfterBackwardCountWhenLarger) {
  auto r = request(200);
  r.given.checkpointing = Checkpointing::block;  // 30 x 0.05 GiB kept, 2 GiB transient
  r.fixed.after_backward_bytes = gib(20);
  EXPECT_NEAR(make_plan(r, made_up_table()).peak_bytes, gib(35 + 20 + 2), 1 << 20);
  r.given.checkpointing = Checkpointing::none;  // 30 x 3 GiB kept: larger than the sums
  EXPECT_NEAR(make_plan(r, made_up_table()).peak_bytes, gib(35 + 90 + 1), 1 << 20);
}

TEST(MemoryPlan, MoreMemoryKeepsMoreBlocks) {
  const auto t = made_up_table();
  const auto at60 = make_plan(request(60), t);
  const auto at80 = make_plan(request(80), t);
  ASSERT_EQ(at60.knobs.checkpointing, Checkpointing::selective);
  ASSERT_EQ(at80.knobs.checkpointing, Checkpointing::selective);
  EXPECT_GT(at60.knobs.selective_blocks, 0);
  EXPECT_GT(at80.knobs.selective_blocks, at60.knobs.selective_blocks);
  EXPECT_LT(at80.step_seconds, at60.step_seconds);
  const auto at110 = make_plan(request(110), t);
  EXPECT_EQ(at110.knobs.checkpointing, Checkpointing::selective);
  EXPECT_EQ(at110.knobs.selective_blocks, -1);  // all keep
  EXPECT_EQ(make_plan(request(200), t).knobs.checkpointing, Checkpointing::none);
}

TEST(MemoryPlan, PredictedTimeNeverGrowsWithMemory) {
  const auto t = made_up_table();
  double last = 1e9;
  for (double budget = 40; budget <= 200; budget += 0.5) {
    const auto p = make_plan(request(budget), t);
    EXPECT_LE(p.peak_bytes, gib(budget)) << budget;
    EXPECT_LE(p.step_seconds, last + 1e-12) << budget;
    last = p.step_seconds;
  }
}

TEST(MemoryPlan, GivenFlagsWin) {
  const auto t = made_up_table();
  auto r = request(80);
  r.given.checkpointing = Checkpointing::block;
  auto p = make_plan(r, t);
  EXPECT_EQ(p.knobs.checkpointing, Checkpointing::block);
  EXPECT_NE(p.why[0].second.find("given"), std::string::npos);

  r = request(80);
  r.given.selective_blocks = 5;
  p = make_plan(r, t);
  EXPECT_EQ(p.knobs.checkpointing, Checkpointing::selective);
  EXPECT_EQ(p.knobs.selective_blocks, 5);

  r = request(80);
  r.given.checkpointing = Checkpointing::none;  // 3 GiB a block: does not fit, the plan says what would
  const auto msg = error_of([&] { make_plan(r, t); });
  EXPECT_NE(msg.find("nothing fits in 80.0 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("leave the memory flags you gave to the plan: --checkpointing selective"), std::string::npos)
      << msg;

  r = request(80);
  r.allow_none = false;
  r.given.checkpointing = Checkpointing::none;
  EXPECT_NE(error_of([&] { make_plan(r, t); }).find("always checkpoints"), std::string::npos);
}

TEST(MemoryPlan, ImpossibleBudgetSaysWhatWouldHelp) {
  const auto t = made_up_table();
  auto msg = error_of([&] { make_plan(request(30), t); });  // below the fixed part
  EXPECT_NE(msg.find("the fixed part alone (35.0 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more GPUs"), std::string::npos) << msg;

  msg = error_of([&] { make_plan(request(38.5), t); });  // block checkpointing needs ~39.2 GiB at 8192 rows
  EXPECT_NE(msg.find("the smallest plan (--checkpointing block) needs 39.2 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more GPUs (torchrun"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a shorter span or smaller frames: up to about"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a larger --memory (at least 39.2 GiB)"), std::string::npos) << msg;

  // a causal trainer with --act-offload off given: offload is the way out
  CostTable c;
  c.source = "made-up causal table";
  for (bool offload : {false, true}) {
    c.rows.push_back(row("block", 8192, offload ? 0.0 : 0.1, 2.0, 0.025, "prefix", offload, 0, offload ? 0.1 : 0));
    c.rows.push_back(row("selective", 8192, offload ? 1.9 : 2.0, 1.0, 0.0195, "prefix", offload, 0, offload ? 0.1 : 0));
  }
  auto r = request(38.5);
  r.causal = true, r.allow_none = false, r.allow_offload = true, r.given.act_offload = false;
  msg = error_of([&] { make_plan(r, c); });
  EXPECT_NE(msg.find("--act-offload on"), std::string::npos) << msg;
  r.given.act_offload.reset();
  const auto p = make_plan(r, c);  // free to offload: block with the inputs on the host fits
  EXPECT_TRUE(p.knobs.act_offload);
  EXPECT_EQ(p.knobs.checkpointing, Checkpointing::block);
  ASSERT_TRUE(p.causal);
  EXPECT_EQ(p.knobs.attn, CausalKernel::prefix);
  EXPECT_GT(p.host_bytes, gib(2.9));
}

TEST(MemoryPlan, AnOffloadThatMovesNothingIsNotPicked) {
  // Offload rows whose selective blocks keep the same bytes on the device (nothing on the host) and, by noise, time
  // a little faster: with every block keeping, the plan leaves offload off; given on, it stays on.
  CostTable c;
  c.preset = "made-up", c.card = "test-card", c.source = "made-up table";
  for (bool offload : {false, true}) {
    c.rows.push_back(row("block", 8192, offload ? 0.0 : 0.1, 2.0, 0.025, "prefix", offload, 0, offload ? 0.1 : 0));
    c.rows.push_back(row("selective", 8192, 1.0, 1.0, offload ? 0.0194 : 0.0195, "prefix", offload, 0, 0));
  }
  auto r = request(120);
  r.causal = true, r.allow_none = false, r.allow_offload = true;
  const auto p = make_plan(r, c);
  EXPECT_EQ(p.knobs.checkpointing, Checkpointing::selective);
  EXPECT_EQ(p.knobs.selective_blocks, -1);  // all
  EXPECT_FALSE(p.knobs.act_offload);
  r.given.act_offload = true;
  EXPECT_TRUE(make_plan(r, c).knobs.act_offload);
}

TEST(MemoryPlan, AttentionKeepAndKernelAreChosen) {
  CostTable c;
  c.source = "made-up causal table";
  for (double keep : {0.0, 0.5, 1.0})
    c.rows.push_back(row("block", 8192, 0.05 + keep * 0.4, 2.0, 0.025 - keep * 0.004, "prefix", false, keep));
  c.rows.push_back(row("selective", 8192, 2.0, 1.0, 0.0195, "prefix"));
  c.rows.push_back(row("block", 8192, 0.05, 2.0, 0.035, "mask"));
  c.rows.push_back(row("selective", 8192, 2.0, 1.0, 0.029, "mask"));
  auto r = request(60);
  r.causal = true, r.allow_none = false;
  const auto p = make_plan(r, c);
  ASSERT_TRUE(p.causal);
  EXPECT_EQ(p.knobs.attn, CausalKernel::prefix);
  EXPECT_GT(p.knobs.attn_keep, 0);  // keeping the attention outputs beats recomputing them while it fits
  EXPECT_NE(p.flags().find("--attn prefix"), std::string::npos);
  r.given.attn = CausalKernel::mask;
  const auto m = make_plan(r, c);
  EXPECT_EQ(m.knobs.attn, CausalKernel::mask);
  EXPECT_EQ(m.knobs.attn_keep, 0);
  EXPECT_GT(m.step_seconds, p.step_seconds);
}

TEST(CostTable, InterpolatesInRowsAndKeeps) {
  const auto t = made_up_table();
  const CostKey block{"full", "block", "full", false, 0};
  const auto mid = t.at(block, 6144);
  EXPECT_NEAR(mid.kept_bytes, 0.0375 * kGiB, 1e3);
  EXPECT_NEAR(mid.seconds, 0.01875, 1e-12);
  EXPECT_FALSE(mid.extrapolated);
  const auto below = t.at(block, 1024);  // kept bytes in proportion to the rows, the rest the smallest row's
  EXPECT_NEAR(below.kept_bytes, 0.025 * kGiB / 4, 1e3);
  EXPECT_NEAR(below.transient_bytes, 1.0 * kGiB, 1e3);
  EXPECT_NEAR(below.seconds, 0.0125, 1e-12);
  EXPECT_TRUE(below.extrapolated);
  const auto above = t.at(block, 16384);  // at least proportional to the rows
  EXPECT_GE(above.kept_bytes, 0.1 * kGiB - 1e3);
  EXPECT_TRUE(above.extrapolated);

  CostTable k;
  k.source = "keeps";
  k.rows.push_back(row("block", 8192, 0.1, 2.0, 0.030, "prefix", false, 0));
  k.rows.push_back(row("block", 8192, 0.5, 2.0, 0.020, "prefix", false, 1));
  const auto half = k.at({"full", "block", "prefix", false, 0.5}, 8192);
  EXPECT_NEAR(half.kept_bytes, 0.3 * kGiB, 1e3);
  EXPECT_NEAR(half.seconds, 0.025, 1e-12);
  const auto msg = error_of([&] { k.at({"full", "selective", "prefix", false, 0}, 8192); });
  EXPECT_NE(msg.find("keeps: no rows for 'full selective prefix'"), std::string::npos) << msg;
}

TEST(CostTable, SavesLoadsAndNamesFileAndKeyInErrors) {
  test::TempDir dir;
  auto t = made_up_table();
  for (auto& r : t.rows) r.text_rows = 1, r.text_row_bytes = 3 << 20;
  const auto path = cost_table_path(dir.path().string(), "test-card", "made-up");
  save_cost_table(t, path);
  const auto back = load_cost_table(path);
  EXPECT_EQ(back.source, path);
  ASSERT_EQ(back.rows.size(), t.rows.size());
  const auto sel = back.at({"full", "selective", "full", false, 0}, 8192);
  EXPECT_NEAR(sel.kept_bytes, 2.0 * kGiB, 1);
  EXPECT_EQ(sel.text_rows, 1);
  EXPECT_EQ(sel.text_row_bytes, 3 << 20);
  EXPECT_NEAR(sel.kept_for_text(3), 2.0 * kGiB + 2 * (3 << 20), 1);
  EXPECT_EQ(find_cost_table({dir.file("nowhere"), dir.path().string()}, "test-card", "made-up"), path);
  EXPECT_EQ(find_cost_table({dir.path().string()}, "other-card", "made-up"), "");

  std::string text;
  {
    std::ifstream f(path);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto write = [&](const std::string& s) { std::ofstream(path) << s; };
  const auto at_kept = text.find("\"kept_bytes\"", text.find("\"rows\""));
  write(text.substr(0, at_kept) + "\"kept_byte\"" + text.substr(at_kept + 12));
  auto msg = error_of([&] { load_cost_table(path); });
  EXPECT_NE(msg.find(path + ": rows[0]: missing key 'kept_bytes'"), std::string::npos) << msg;

  write(text.substr(0, text.find("\"rows\"")) +
        "\"rows\": [{\"training\": \"full\", \"checkpointing\": \"block\", "
        "\"attn\": \"full\", \"offload\": false, \"attn_keep\": \"half\"}]}");
  msg = error_of([&] { load_cost_table(path); });
  EXPECT_NE(msg.find(path + ": rows[0]: key 'attn_keep': expected a number"), std::string::npos) << msg;

  write("{\"format\": \"vdt-plan-costs/0\"}");
  msg = error_of([&] { load_cost_table(path); });
  EXPECT_NE(msg.find(path + ": key 'format': expected 'vdt-plan-costs/1'"), std::string::npos) << msg;

  write("{");
  EXPECT_NE(error_of([&] { load_cost_table(path); }).find(path + ": not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { load_cost_table(dir.file("missing.json")); }).find("missing.json: cannot open"),
            std::string::npos);
}

TEST(MemoryPlan, FixedMemoryFromParameterCounts) {
  const int64_t P = 5'000'000'000;
  FixedMemoryInputs in;
  in.trainable_params = P, in.compute_bytes = 2, in.moment_bytes = 2;  // --precision bf16
  auto f = fixed_memory(in);
  EXPECT_EQ(f.static_bytes, 6 * P);             // weights + two bf16 moments
  EXPECT_EQ(f.grad_bytes, 2 * P);               // bf16 gradients through backward
  in.fp32_masters = true, in.moment_bytes = 4;  // --precision mixed, one micro batch
  f = fixed_memory(in);
  EXPECT_EQ(f.static_bytes, 14 * P);         // bf16 weights, fp32 masters and two moments
  EXPECT_EQ(f.grad_bytes, 2 * P);            // bf16 gradients through backward
  EXPECT_EQ(f.after_backward_bytes, 4 * P);  // then fp32 sums until the step
  in.grad_accum = 2;  // docs/distributed.md's one-GPU column: the sums kept between micro batches
  f = fixed_memory(in);
  EXPECT_EQ(f.static_bytes, 18 * P);
  EXPECT_EQ(f.grad_bytes, 2 * P);  // each micro batch's bf16 gradients, moved into the sums after its backward
  EXPECT_EQ(f.after_backward_bytes, 0);
  in.grad_accum = 1;
  in.world = 2, in.zero2 = true;  // its two-GPU column: sharded terms halved, the full fp32 buckets through backward
  f = fixed_memory(in);
  EXPECT_EQ(f.static_bytes, 2 * P + (4 + 8 + 4) * P / 2);
  EXPECT_EQ(f.grad_bytes, 4 * P + 4 * P / 2);  // the fp32 buckets and their reduce-scattered slices

  FixedMemoryInputs lora;  // a float32 LoRA on a bf16 base sharded over 8 ranks
  lora.trainable_params = 100'000'000, lora.trainable_bytes = 4, lora.moment_bytes = 4;
  lora.frozen_params = 33'000'000'000, lora.frozen_block_params = 32'000'000'000, lora.blocks = 50;
  lora.world = 8, lora.shard_ranks = 8;
  f = fixed_memory(lora);
  const int64_t weights = 100'000'000LL * 4 + 1'000'000'000LL * 2 + (4'000'000'000LL + 2 * 640'000'000LL) * 2;
  EXPECT_EQ(f.static_bytes, weights + 8 * 100'000'000LL);
  EXPECT_EQ(f.grad_bytes, 4 * 100'000'000LL);

  EXPECT_EQ(parse_memory_budget("80", 0), gib(80));
  EXPECT_NEAR(static_cast<double>(parse_memory_budget("auto", gib(100))), static_cast<double>(gib(97)), 2);
  EXPECT_NE(error_of([] { parse_memory_budget("auto", 0); }).find("--memory auto: no GPU memory"), std::string::npos);
  EXPECT_NE(error_of([] { parse_memory_budget("80GB", 0); }).find("--memory '80GB': expected auto or a positive"),
            std::string::npos);
}

TEST(CostTable, AnalyticEstimateOrdersTheModes) {
  auto model = make_denoiser("tiny", {}, 2);
  auto dims = model_dims(*model, 5);
  EXPECT_EQ(dims.width, model->width());
  EXPECT_GT(dims.ffn_hidden, dims.width);
  // the 5B's dimensions (docs/BENCHMARKS.md): per-block memory near the measured differences between rows
  ModelDims d{3072, 14336, 14336, 166'000'000, 512, 2};
  const auto t = analytic_cost_table(d, "full", 0, {8190}, 300);
  const auto none = t.at({"full", "none", "full", false, 0}, 8190);
  const auto sel = t.at({"full", "selective", "full", false, 0}, 8190);
  const auto blk = t.at({"full", "block", "full", false, 0}, 8190);
  EXPECT_GT(none.kept_bytes, sel.kept_bytes);
  EXPECT_GT(sel.kept_bytes, blk.kept_bytes);
  EXPECT_GT(sel.kept_bytes, 0.66 * kGiB);  // measured: ~0.66 GiB more than block per block
  EXPECT_LT(sel.kept_bytes, 1.5 * kGiB);
  EXPECT_LT(none.seconds, sel.seconds);
  EXPECT_LT(sel.seconds, blk.seconds);
  const auto causal = analytic_cost_table(d, "lora", 6, {7020}, 300);
  EXPECT_TRUE(causal.has({"lora", "block", "prefix", true, 1}));
  EXPECT_FALSE(causal.has({"lora", "none", "prefix", false, 0}));
  EXPECT_LT(causal.at({"lora", "block", "prefix", false, 1}, 7020).seconds,
            causal.at({"lora", "block", "prefix", false, 0}, 7020).seconds);
}

// `bench plan` on the CPU: the tiny preset's table, written and read back, and a plan made from it.
TEST(PlanBench, TinyPresetWritesATableTheLoaderReads) {
  test::TempDir dir;
  PlanBenchConfig cfg;
  cfg.model = "tiny", cfg.device = "cpu", cfg.precision = "fp32";
  cfg.frames = "2,4", cfg.height = 4, cfg.width = 4, cfg.text_len = 5;
  cfg.repeats = 1, cfg.warmup = 0, cfg.plans_dir = dir.path().string(), cfg.measured = "test";
  auto r = run_plan_bench(cfg);
  EXPECT_EQ(r.path, cost_table_path(dir.path().string(), "cpu", "tiny"));
  EXPECT_EQ(r.lines.size(), 6u);  // none, block, selective at two sizes

  // the causal kinds go into the same file beside the full ones
  cfg.training = "lora", cfg.attention = "causal", cfg.frames = "6";
  r = run_plan_bench(cfg);
  EXPECT_EQ(r.lines.size(), 10u);

  const auto t = load_cost_table(r.path);
  EXPECT_EQ(t.preset, "tiny");
  EXPECT_EQ(t.card, "cpu");
  EXPECT_FALSE(t.memory_measured);
  EXPECT_EQ(t.rows.size(), 16u);
  for (const auto& row : t.rows) {
    EXPECT_GT(row.seconds, 0) << row.key.describe();
    EXPECT_EQ(row.kept_bytes, 0) << row.key.describe();  // not measured on the CPU
    EXPECT_EQ(row.text_rows, 1) << row.key.describe();   // Wan's text: measured with one caption
  }
  const CostKey sel{"full", "selective", "full", false, 0};
  EXPECT_EQ(t.at(sel, 2 * 2 * 2).seconds > 0, true);  // 2 frames of 2x2 tokens
  EXPECT_TRUE(t.has({"lora", "block", "prefix", true, 1}));
  EXPECT_TRUE(t.has({"lora", "selective", "mask", false, 0}));
  EXPECT_TRUE(t.has_kind("full", false));
  EXPECT_TRUE(t.has_kind("lora", true));
  EXPECT_FALSE(t.has_kind("full", true));

  // a plan from the measured times and the estimated memory
  auto model = make_denoiser("tiny", {}, 2);
  const auto est = analytic_cost_table(model_dims(*model, 5), "full", 0, {8, 16}, 1);
  const auto costs = with_memory_from(t, est);
  PlanRequest req;
  req.budget_bytes = gib(1), req.blocks = 2, req.rows = 16;
  const auto p = make_plan(req, costs);
  EXPECT_NE(p.table_lines()[0].find("(times)"), std::string::npos);
}

}  // namespace
}  // namespace vdt

namespace vdt {
namespace {

// The tables checked in under plans/ load, name their card and preset as their path does, and hold the kinds of
// training the benchmark rows plan with (benchmarks/plan_rows.txt): a table broken by hand fails here, not at start-up.
TEST(CostTable, TheCheckedInTablesLoad) {
  const std::filesystem::path plans = std::filesystem::path(VDT_FIXTURES_DIR).parent_path().parent_path() / "plans";
  int tables = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(plans)) {
    if (e.path().extension() != ".json") continue;
    const auto t = load_cost_table(e.path().string());
    EXPECT_EQ(t.card, e.path().parent_path().filename().string()) << e.path();
    EXPECT_EQ(t.preset, e.path().stem().string()) << e.path();
    EXPECT_FALSE(t.rows.empty()) << e.path();
    ++tables;
  }
  ASSERT_GE(tables, 2);
  const auto wan = load_cost_table((plans / "nvidia-h200" / "wan2.2-ti2v-5b.json").string());
  EXPECT_TRUE(wan.has_kind("full", false));
  EXPECT_TRUE(wan.has_kind("lora", true));
  for (const auto& r : wan.rows) EXPECT_EQ(r.text_rows, 1) << r.key.describe();  // Wan: measured with one caption
  EXPECT_TRUE(load_cost_table((plans / "nvidia-h200" / "minimax-h3.json").string()).has_kind("lora", true));
}

// The analytic estimate, what a card without a table plans from, is conservative against every row the checked-in
// tables measured, at the preset's own dimensions (a model of one block, bf16 on the CPU): its device bytes at least
// the measured ones, its device and host bytes together at least theirs (tables measured before offload rows left
// the block's output out count that output on the device), a caption's bytes at least the measured ones (within the
// 0.1 MB a block-checkpointed row measures by the allocator's rounding), and for a LoRA its backward's working set at
// least the measured one. (Under full training the measured working set also holds the block's own weight gradients,
// which the fixed part counts: docs/planner.md.)
TEST(CostTable, AnalyticEstimateCoversTheMeasuredTables) {
  const std::filesystem::path plans = std::filesystem::path(VDT_FIXTURES_DIR).parent_path().parent_path() / "plans";
  std::map<std::string, std::shared_ptr<Denoiser>> models;  // one block of each preset
  int compared = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(plans)) {
    if (e.path().extension() != ".json") continue;
    const auto t = load_cost_table(e.path().string());
    if (!t.memory_measured) continue;
    auto& model = models[t.preset];
    if (!model) model = make_denoiser(t.preset, torch::TensorOptions().dtype(torch::kBFloat16), 1);
    for (const auto& r : t.rows) {
      const auto est = analytic_cost_table(model_dims(*model, r.text_len), r.key.training, r.chunks, {r.rows}, 400)
                           .at(r.key, r.rows);
      const std::string where = e.path().filename().string() + " (" + t.card + "): " + r.key.describe() + " at " +
                                std::to_string(r.rows) + " rows";
      EXPECT_GE(est.kept_bytes + est.host_bytes, r.kept_bytes + r.host_bytes) << where;
      if (!r.key.offload) {
        EXPECT_GE(est.kept_bytes, r.kept_bytes) << where;
      }
      EXPECT_GE(est.text_row_bytes + 0.1e6, r.text_row_bytes) << where;
      if (r.key.training == "lora") {
        EXPECT_GE(est.transient_bytes, r.transient_bytes) << where;
      }
      ++compared;
    }
  }
  EXPECT_EQ(models.size(), 3u);  // the three presets the benchmarks plan for
  EXPECT_GE(compared, 150);      // two cards' tables of the three presets
}

}  // namespace
}  // namespace vdt
