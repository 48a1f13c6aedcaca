// The trainers' memory plan at start-up (train/plan/startup_plan.h) on the CPU: with --memory in GiB and a made-up
// cost table (found through $VDT_PLANS) the plan's lines are in the start-up table, config.json / args.json record it
// and done.json / the summary carry the predicted peak; flags given on the command line win, even at their default
// value; a bad --memory names the flag; --memory auto on the CPU plans nothing (the flags as given).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "causal_test_util.h"
#include "core/error.h"
#include "sft_test_util.h"
#include "test_util.h"
#include "train/causal/causal_trainer.h"
#include "train/plan/cost_table.h"
#include "train/plan/startup_plan.h"

namespace vdt {
namespace {

// Per block: none fastest and largest, selective between, block smallest and slowest; a few KiB, so every mode fits
// a budget of 1 GiB and the plan takes the fastest the flags leave open.
void write_made_up_table(const std::string& plans_dir, const std::string& training, const std::string& attn) {
  CostTable t;
  t.preset = "tiny", t.card = "cpu", t.device_name = "cpu", t.measured = "made up";
  auto add = [&](const std::string& ckpt, double kept, double seconds) {
    for (int64_t rows : {8, 4096}) {
      CostRow r;
      r.key = {training, ckpt, attn, false, 0};
      r.rows = rows, r.kept_bytes = kept * rows, r.transient_bytes = 64.0 * rows, r.seconds = seconds * rows / 8;
      r.outside_seconds = 1e-4, r.chunks = attn == "full" ? 0 : 6;
      t.rows.push_back(r);
    }
  };
  if (attn == "full") add("none", 64, 0.010);
  add("selective", 32, 0.012);
  add("block", 4, 0.020);
  std::filesystem::create_directories(std::filesystem::path(cost_table_path(plans_dir, "cpu", "tiny")).parent_path());
  save_cost_table(t, cost_table_path(plans_dir, "cpu", "tiny"));
}

nlohmann::json plan_test_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class StartupPlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    res_ = test::write_sft_root(dir_.file("data"));
    write_made_up_table(dir_.file("plans"), "full", "full");
  }
  test::RunResult train(const std::string& name, const std::string& extra) {
    return test::run_command("VDT_PLANS=" + dir_.file("plans") + " " + VDT_BINARY + " train sft --data_root " +
                             dir_.file("data") + " --res " + res_ + " --output " + dir_.file(name) +
                             " --model tiny --random-init --device cpu --precision fp32 --max_steps 2 --batch_size 1 "
                             "--grad_accum 1 --save_every 0 --val_every 0 --num_workers 1 " +
                             extra + " 2>&1");
  }
  test::TempDir dir_;
  std::string res_;
};

// --memory 1 and the made-up table: every mode fits, the plan takes none (the fastest); the start-up table shows the
// plan, config.json records it, done.json has the predicted peak beside the measured one.
TEST_F(StartupPlanCli, TrainSftPrintsAndRecordsThePlan) {
  const auto r = train("run", "--memory 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("| memory plan: 1.0 GiB per GPU (--memory 1), costs "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("|   --checkpointing   none  (plan: fastest that fits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("|   predicted peak    "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(predicted "), std::string::npos) << r.output;  // the [done] line
  const auto config = plan_test_json(dir_.file("run/config.json"));
  ASSERT_TRUE(config.contains("memory_plan")) << config.dump(1);
  EXPECT_EQ(config["memory_plan"]["flags"], "--checkpointing none");
  EXPECT_GT(config["memory_plan"]["predicted_peak_gib"].get<double>(), 0);
  EXPECT_FALSE(config["memory_plan"]["table"].empty());
  const auto done = plan_test_json(dir_.file("run/done.json"));
  EXPECT_GT(done["peak_mem_gb_predicted"].get<double>(), 0);
}

// A flag given on the command line wins even at its default value (only the binding knows it was given).
TEST_F(StartupPlanCli, GivenFlagsWinThroughTheCommandLine) {
  const auto r = train("given", "--memory 1 --checkpointing block");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("|   --checkpointing   block  (given)"), std::string::npos) << r.output;
  EXPECT_EQ(plan_test_json(dir_.file("given/config.json"))["memory_plan"]["flags"], "--checkpointing block");
  const auto off = train("off", "--memory 1 --no-gradient_checkpointing");
  ASSERT_EQ(off.code, 0) << off.output;
  EXPECT_NE(off.output.find("|   --checkpointing   none  (given)"), std::string::npos) << off.output;
}

// --memory auto (the default) on the CPU: no plan, today's defaults, nothing recorded.
TEST_F(StartupPlanCli, AutoOnTheCpuPlansNothing) {
  const auto r = train("auto", "");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("memory plan"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checkpointing block"), std::string::npos) << r.output;
  EXPECT_FALSE(plan_test_json(dir_.file("auto/config.json")).contains("memory_plan"));
  EXPECT_FALSE(plan_test_json(dir_.file("auto/done.json")).contains("peak_mem_gb_predicted"));
}

// --precision left out on one process: mixed where a plan fits it, else bf16 (the Python trainer's single-process
// mode), said in the start-up table and recorded; a precision nothing fits is refused before any step, naming what
// would fit. The budgets sit around the tiny base's fixed part under each precision (above the plan's 0.5 GiB margin).
TEST(StartupPlan, OneProcessSftTakesBf16WhenMixedDoesNotFit) {
  test::TempDir dir;
  const std::string res = test::write_sft_root(dir.file("data"));
  auto train = [&](const std::string& name, const std::string& extra) {
    return test::run_vdt("train sft --data_root " + dir.file("data") + " --res " + res + " --output " + dir.file(name) +
                         " --model tiny --random-init --device cpu --max_steps 1 --batch_size 1 --grad_accum 1 "
                         "--save_every 0 --val_every 0 --num_workers 1 " +
                         extra);
  };
  const auto roomy = train("roomy", "--memory 0.52");
  ASSERT_EQ(roomy.code, 0) << roomy.output;
  EXPECT_NE(roomy.output.find("precision mixed"), std::string::npos) << roomy.output;
  const auto tight = train("tight", "--memory 0.509");
  ASSERT_EQ(tight.code, 0) << tight.output;
  EXPECT_NE(tight.output.find("| precision bf16: --precision left out, one process, and mixed"), std::string::npos)
      << tight.output;
  const auto config = plan_test_json(dir.file("tight/config.json"));
  EXPECT_EQ(config["args"]["precision"], "bf16");
  EXPECT_EQ(config["env"]["mixed_precision"], "no");
  const auto given = train("given", "--memory 0.509 --precision mixed");
  EXPECT_NE(given.code, 0) << given.output;
  EXPECT_NE(given.output.find("--memory: nothing fits in"), std::string::npos) << given.output;
  EXPECT_NE(given.output.find("--precision bf16 (the Python trainer's single-process mode"), std::string::npos)
      << given.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("given/config.json")));  // refused before the run began
  const auto none = train("none", "--memory 0.501");
  EXPECT_NE(none.code, 0) << none.output;
  EXPECT_NE(none.output.find("--precision bf16 does not fit either"), std::string::npos) << none.output;
}

TEST(StartupPlan, BadMemoryNamesTheFlag) {
  test::TempDir d;
  for (const std::string& args :
       {"train sft --data_root /nonexistent --output " + d.file("s") + " --random-init --device cpu --memory lots",
        "train causal --data-root /nonexistent --out " + d.file("c") + " --random-init --device cpu --memory=-3",
        std::string("bench step --trainer sft --model tiny --device cpu --memory 0")}) {
    const auto r = test::run_vdt(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.output.find("--memory '"), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("expected auto or a positive number of GiB"), std::string::npos) << args << "\n"
                                                                                             << r.output;
  }
}

// The causal trainer built in code: --memory 1 with the made-up LoRA table; the values set in code that differ from
// their defaults count as given (here --attn-keep 0 is the default, --act-offload off too: the plan picks them).
TEST(StartupPlan, CausalTrainerPlansAndRecords) {
  test::TempDir dir;
  synth_root(test::wan_causal_root(dir.file("data")));
  write_made_up_table(dir.file("plans"), "lora", "prefix");
  ::setenv("VDT_PLANS", dir.file("plans").c_str(), 1);
  auto c = test::causal_test_run(dir.file("data"), dir.file("run"), "tiny", 1, 2);
  c.memory.memory = "1";
  const auto sum = train_causal(c);
  ::unsetenv("VDT_PLANS");
  EXPECT_GT(sum.predicted_peak_gb, 0);
  const auto args = plan_test_json(dir.file("run/args.json"));
  ASSERT_TRUE(args.contains("memory_plan")) << args.dump(1);
  EXPECT_EQ(args["memory_plan"]["flags"],
            "--checkpointing selective --selective-blocks -1 --attn-keep 0 --attn prefix");
  EXPECT_EQ(args["checkpointing"], "selective");  // the plan's choice, in the run's flags
}

// The causal trainer streams its frozen blocks (--stream-blocks 2: all of tiny's) with the losses of the resident
// run, trains on an FP8-stored base (--base-dtype fp8: another base, so other losses), and refuses a budget no plan
// meets, naming the smallest budget that works.
TEST(StartupPlan, CausalTrainerStreamsItsBaseAndStoresItAsFp8) {
  test::TempDir dir;
  synth_root(test::wan_causal_root(dir.file("data")));
  auto run = [&](const std::string& name, const std::string& stream, const std::string& dtype) {
    auto c = test::causal_test_run(dir.file("data"), dir.file(name), "tiny", 1, 2);
    c.causal_memory.stream_blocks = stream, c.causal_memory.base_dtype = dtype;
    return train_causal(c);
  };
  const auto resident = run("a", "auto", "bf16"), streamed = run("b", "2", "bf16");
  ASSERT_EQ(resident.losses.size(), 2u);
  EXPECT_EQ(resident.losses, streamed.losses);
  const auto fp8 = run("c", "1", "fp8");
  ASSERT_EQ(fp8.losses.size(), 2u);
  EXPECT_NE(fp8.losses, resident.losses);
  const auto args = plan_test_json(dir.file("c/args.json"));
  EXPECT_EQ(args["stream_blocks"], "1");
  EXPECT_EQ(args["base_dtype"], "fp8");

  write_made_up_table(dir.file("plans"), "lora", "prefix");
  ::setenv("VDT_PLANS", dir.file("plans").c_str(), 1);
  auto c = test::causal_test_run(dir.file("data"), dir.file("d"), "tiny", 1, 2);
  c.memory.memory = "0.01";
  std::string msg = "(no error)";
  try {
    train_causal(c);
  } catch (const Error& e) {
    msg = e.what();
  }
  ::unsetenv("VDT_PLANS");
  EXPECT_NE(msg.find("the smallest budget that works: "), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("d/args.json")));  // refused before the run was set up
}

}  // namespace
}  // namespace vdt
