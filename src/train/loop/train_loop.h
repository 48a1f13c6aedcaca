// The one training loop of every trainer (llm.c's fenced section, torchtitan's train()): the loop owns step counting,
// the non-finite stop, validation cadence, when to save, the stop signal, the trace of one step and the last step;
// a trainer supplies its step, its logging, its validation and its files through LoopTrainer.
// Not here: what a step computes, what a save writes (the trainers, train/checkpoint), how ranks reduce (RunContext).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vdt {

class RunContext;

// What the loop needs of a step; a trainer keeps its own richer statistics for its log.
struct StepResult {
  double loss = 0, grad_norm = 0;  // the loss reduced over the ranks: every rank sees the same value
  bool stop = false;               // a stop signal reached some rank
};

// Why a step saves: its cadence (--save_every), the last step, or a stop signal; the trainer decides what each writes.
struct SaveWhy {
  bool cadence = false, last = false, stop = false;
  bool any() const { return cadence || last || stop; }
};

struct LoopPlan {
  int64_t start_step = 0;       // the last step done before this process (0: a fresh run)
  int64_t last_step = 0;        // the step the run ends at
  int64_t val_every = 0;        // validate at multiples of it (0: never)
  bool validate_last = true;    // ... and at the last step
  bool validate_first = false;  // ... and once before the first step of a fresh run (step 0)
  int64_t save_every = 0;       // SaveWhy::cadence at multiples of it (0: never)
};

class LoopTrainer {
 public:
  virtual ~LoopTrainer() = default;
  // Runs step `step` (1-based: the first step of a fresh run is 1).
  virtual StepResult train_step(int64_t step) = 0;
  // After each step: `step_time` this step's seconds, `elapsed` seconds since this process's first step.
  virtual void log_step(int64_t step, const StepResult& st, double step_time, double elapsed) = 0;
  virtual void validate(int64_t step) = 0;
  // Called when why.any(); the trainer decides what each reason writes.
  virtual void save(int64_t step, SaveWhy why) = 0;
  // A stop signal after `step` (saved by then): says how to continue.
  virtual void stopped(int64_t step) = 0;
  // A non-finite loss at `step`: throws, saying what is intact and what to try.
  [[noreturn]] virtual void fail_non_finite(int64_t step, double loss) = 0;
};

struct LoopResult {
  int64_t steps = 0;  // the step reached
  bool stopped = false;
  double first_loss = 0, last_loss = 0, seconds = 0;   // seconds: wall time of this process's steps
  std::vector<double> losses, grad_norms, step_times;  // every step of this process, in order (golden curves, bench)
};

// Runs steps plan.start_step + 1 .. plan.last_step; returns early (stopped) on a stop signal, also one that came
// during start-up (nothing trained, nothing saved).
LoopResult run_training_loop(RunContext& ctx, const LoopPlan& plan, LoopTrainer& trainer);

}  // namespace vdt
