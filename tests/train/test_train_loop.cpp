// The one training loop (train/loop/train_loop.h) with a scripted trainer: the cadence of validation and saves, the
// last step, a stop signal after a step and during start-up, a non-finite loss, a run already at its last step.
#include <gtest/gtest.h>

#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/stop_signal.h"
#include "distributed/communicator.h"
#include "train/loop/run_context.h"
#include "train/loop/train_loop.h"

namespace vdt {
namespace {

// Records every call as a word ("step3", "val3", "save3:cls" for cadence / last / stop, "stopped3").
class ScriptedTrainer final : public LoopTrainer {
 public:
  std::vector<std::string> calls;
  int64_t stop_at = -1, nan_at = -1;
  StepResult train_step(int64_t step) override {
    calls.push_back("step" + std::to_string(step));
    return {step == nan_at ? std::nan("") : 1.0 / static_cast<double>(step), 0.5, step == stop_at};
  }
  void log_step(int64_t step, const StepResult& st, double step_time, double elapsed) override {
    EXPECT_GE(step_time, 0.0);
    EXPECT_GE(elapsed, step_time);
    EXPECT_DOUBLE_EQ(st.grad_norm, 0.5);
  }
  void validate(int64_t step) override { calls.push_back("val" + std::to_string(step)); }
  void save(int64_t step, SaveWhy why) override {
    calls.push_back("save" + std::to_string(step) + ":" + (why.cadence ? "c" : "") + (why.last ? "l" : "") +
                    (why.stop ? "s" : ""));
  }
  void stopped(int64_t step) override { calls.push_back("stopped" + std::to_string(step)); }
  [[noreturn]] void fail_non_finite(int64_t step, double) override {
    throw std::runtime_error("non-finite at " + std::to_string(step));
  }
};

struct LoopFixture : ::testing::Test {
  std::unique_ptr<Communicator> comm = make_single_rank();
  RunContext ctx{*comm, "cpu", 0, torch::kFloat32};
  ScriptedTrainer t;
};

TEST_F(LoopFixture, CadenceAndLastStep) {
  const auto res = run_training_loop(ctx, {.start_step = 0, .last_step = 5, .val_every = 2, .save_every = 2}, t);
  const std::vector<std::string> want = {"step1", "step2",   "val2",  "save2:c", "step3",  "step4",
                                         "val4",  "save4:c", "step5", "val5",    "save5:l"};
  EXPECT_EQ(t.calls, want);
  EXPECT_EQ(res.steps, 5);
  EXPECT_FALSE(res.stopped);
  ASSERT_EQ(res.losses.size(), 5u);
  EXPECT_DOUBLE_EQ(res.first_loss, 1.0);
  EXPECT_DOUBLE_EQ(res.last_loss, 0.2);
  EXPECT_EQ(res.step_times.size(), 5u);
}

TEST_F(LoopFixture, ResumedRunStartsAfterItsStepAndValidatesFirstOnlyWhenFresh) {
  LoopPlan plan{.start_step = 3,
                .last_step = 4,
                .val_every = 10,
                .validate_last = false,
                .validate_first = true,
                .save_every = 10};
  run_training_loop(ctx, plan, t);
  EXPECT_EQ(t.calls, (std::vector<std::string>{"step4", "save4:l"}));
  t.calls.clear();
  plan.start_step = 0, plan.last_step = 1;
  run_training_loop(ctx, plan, t);
  EXPECT_EQ(t.calls, (std::vector<std::string>{"val0", "step1", "save1:l"}));
}

TEST_F(LoopFixture, StopSignalSavesThenStops) {
  t.stop_at = 2;
  const auto res = run_training_loop(ctx, {.start_step = 0, .last_step = 5, .save_every = 4}, t);
  EXPECT_EQ(t.calls, (std::vector<std::string>{"step1", "step2", "save2:s", "stopped2"}));
  EXPECT_TRUE(res.stopped);
  EXPECT_EQ(res.steps, 2);
}

TEST_F(LoopFixture, StopAtTheLastStepIsTheLastStep) {
  t.stop_at = 2;
  const auto res = run_training_loop(ctx, {.start_step = 0, .last_step = 2}, t);
  EXPECT_EQ(t.calls, (std::vector<std::string>{"step1", "step2", "save2:l"}));
  EXPECT_FALSE(res.stopped);
}

TEST_F(LoopFixture, StopDuringStartUpTrainsNothing) {
  StopOnSignal guard;
  std::raise(SIGTERM);
  const auto res = run_training_loop(ctx, {.start_step = 0, .last_step = 3, .val_every = 1, .validate_first = true}, t);
  StopOnSignal::reset();
  EXPECT_TRUE(res.stopped);
  EXPECT_TRUE(t.calls.empty());
  EXPECT_EQ(res.steps, 0);
}

TEST_F(LoopFixture, NonFiniteLossFailsBeforeLoggingOrSaving) {
  t.nan_at = 2;
  EXPECT_THROW(
      {
        try {
          run_training_loop(ctx, {.start_step = 0, .last_step = 3, .save_every = 1}, t);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "non-finite at 2");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(t.calls, (std::vector<std::string>{"step1", "save1:c", "step2"}));
}

TEST_F(LoopFixture, NothingToTrainAtTheLastStep) {
  const auto res = run_training_loop(ctx, {.start_step = 5, .last_step = 5, .val_every = 1, .validate_first = true}, t);
  EXPECT_TRUE(t.calls.empty());
  EXPECT_EQ(res.steps, 5);
}

}  // namespace
}  // namespace vdt
