// The one training loop (train_loop.h): the fenced section both trainers run.
#include "train/loop/train_loop.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/stop_signal.h"
#include "train/loop/run_context.h"
#include "train/loop/trace.h"

namespace vdt {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

LoopResult run_training_loop(RunContext& ctx, const LoopPlan& plan, LoopTrainer& trainer) {
  LoopResult res;
  res.steps = plan.start_step;
  if (plan.start_step >= plan.last_step) return res;
  if (ctx.stop_requested_anywhere()) {  // a signal during start-up: the run directory is as the last run left it
    if (ctx.rank == 0)
      std::printf(
          "[stop] %s during start-up, before step %lld: nothing was trained or saved. Re-run the same "
          "command to continue.\n",
          StopOnSignal::signal_name(), static_cast<long long>(plan.start_step + 1));
    std::fflush(stdout);
    res.stopped = true;
    return res;
  }
  StepTrace trace(ctx.rank, ctx.world);  // VDT_TRACE / VDT_TRACE_STEP: one step's profiler trace (benchmarks)
  if (plan.validate_first && plan.val_every > 0 && plan.start_step == 0) trainer.validate(0);
  ctx.reset_peak_memory();  // the peak of training, not of the build
  const auto t_start = Clock::now();
  // ------------------------------------------ TRAINING SECTION ------------------------------------------
  for (int64_t step = plan.start_step + 1; step <= plan.last_step; ++step) {
    const bool last_step = step == plan.last_step;
    const auto t0 = Clock::now();
    trace.before_step(step);
    const StepResult st = trainer.train_step(step);
    trace.after_step(step);
    const auto t1 = Clock::now();
    if (!std::isfinite(st.loss)) trainer.fail_non_finite(step, st.loss);  // reduced: every rank stops here
    res.first_loss = step == plan.start_step + 1 ? st.loss : res.first_loss, res.last_loss = st.loss;
    res.steps = step;
    res.losses.push_back(st.loss), res.grad_norms.push_back(st.grad_norm);
    res.step_times.push_back(seconds_between(t0, t1));
    trainer.log_step(step, st, res.step_times.back(), seconds_between(t_start, t1));
    if (plan.val_every > 0 && (step % plan.val_every == 0 || (last_step && plan.validate_last))) trainer.validate(step);
    SaveWhy why;
    why.cadence = plan.save_every > 0 && step % plan.save_every == 0;
    why.last = last_step, why.stop = st.stop && !last_step;
    if (why.any()) trainer.save(step, why);
    if (why.stop) {
      trainer.stopped(step);
      std::fflush(stdout);
      res.stopped = true;
      break;
    }
  }
  // ------------------------------------------------- END -------------------------------------------------
  res.seconds = seconds_between(t_start, Clock::now());
  std::fflush(stdout);
  return res;
}

}  // namespace vdt
