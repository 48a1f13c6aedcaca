// What the SFT trainer's tests share: a small synthetic root, the flags of a short run on it, and the fixture of a
// suite on one such root.
#pragma once
#include <string>

#include "test_util.h"
#include "tools/synth.h"
#include "train/sft/sft_trainer.h"

namespace vdt {
namespace test {

// A root at the tiny preset's widths: `train_runs` runs of `clips_per_run` train clips (`n_drop` flagged) and the
// default val runs. Returns its res.
inline std::string write_sft_root(const std::string& out, int64_t train_runs = 2, int64_t clips_per_run = 3,
                                  int64_t n_drop = 1) {
  SynthConfig sc;
  sc.out = out, sc.train_runs = train_runs, sc.train_clips_per_run = clips_per_run, sc.n_drop = n_drop;
  return synth_root(sc).res;
}

// The flags of a short run on `root` (of resolution `res`) into `out`: the tiny preset from random weights on the CPU
// in fp32 without checkpointing, batch 1 without accumulation, lr 1e-3 (the adapter's too) after 2 warm-up steps, a
// save every 2 steps, one loader thread.
inline SftConfig sft_test_run(const std::string& root, const std::string& res, const std::string& out, int64_t steps) {
  SftConfig c;
  c.data_root = root, c.output = out, c.res = res;
  c.model = "tiny", c.random_init = true, c.compute.device = "cpu", c.compute.precision = "fp32",
  c.gradient_checkpointing = false;
  c.max_steps = steps, c.batch_size = 1, c.grad_accum = 1, c.lr = 1e-3, c.cond_lr = 1e-3, c.warmup_steps = 2;
  c.save_every = 2, c.num_workers = 1;
  return c;
}

// A suite on one root written by write_sft_root into dir_/data before its first test; run_config gives the flags of
// a short run on it (sft_test_run) into dir_/name.
template <class Suite>
class SftSuiteTest : public SuiteDirTest<Suite> {
 public:
  static void write_suite_files(const TempDir& dir) { res_ = write_sft_root(dir.file("data")); }

 protected:
  static SftConfig run_config(const std::string& name, int64_t steps) {
    const TempDir& dir = *SuiteDirTest<Suite>::dir_;
    return sft_test_run(dir.file("data"), res_, dir.file(name), steps);
  }
  static inline std::string res_;
};

}  // namespace test
}  // namespace vdt
