// `vdt train sft`: the Python trainer gc25d's flags with its names and defaults (docs/design.md §4), plus --model,
// --res, --precision,
// --device. `vdt train causal`: the Python trainer rtcwm's flags (docs/design.md §5), plus --model, --weights,
// --chunk-frames,
// --lora-rank, --lora-alpha and the data, device and sharding flags. `vdt train distill`: a few-step student from a
// causal LoRA (Self-Forcing's DMD on one base, docs/distill.md).
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <sstream>
#include <vector>

#include "cli/commands.h"
#include "core/device_flag.h"
#include "distributed/communicator.h"
#include "train/causal/causal_trainer.h"
#include "train/distill/distill_trainer.h"
#include "train/sft/sft_trainer.h"

namespace vdt::cli {

std::string spellings(const std::string& names) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  std::stringstream ss(names);
  for (std::string n; std::getline(ss, n, ',');) {
    add(n);
    const size_t prefix = n.rfind("!--", 0) == 0 ? 3 : n.rfind("--", 0) == 0 ? 2 : 0;
    if (prefix == 0) continue;
    std::string dash = n, under = n;
    std::replace(dash.begin() + static_cast<std::ptrdiff_t>(prefix), dash.end(), '_', '-');
    std::replace(under.begin() + static_cast<std::ptrdiff_t>(prefix), under.end(), '-', '_');
    add(dash), add(under);
  }
  std::string joined;
  for (const auto& n : out) joined += (joined.empty() ? "" : ",") + n;
  return joined;
}

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  if (is_positional) return CLI::Formatter::make_option_name(opt, is_positional);
  std::vector<std::string> names, seen;
  for (const auto& s : opt->get_snames()) names.push_back("-" + s);
  for (auto l : opt->get_lnames()) {
    std::string key = l;
    std::replace(key.begin(), key.end(), '-', '_');
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    names.push_back("--" + l);
  }
  std::string joined;
  for (const auto& n : names) joined += (joined.empty() ? "" : ", ") + n;
  return joined;
}

std::unique_ptr<Communicator> communicator_for(const LaunchEnv& env, std::string& device) {
  if (env.world > 1 && device == "auto") device = "cuda";
  // One process: the trainer resolves --device after validating its config. Several: NCCL binds the rank's GPU now
  // (cuda -> GPU LOCAL_RANK; cuda:N is an error there, core/device_flag.h).
  return make_communicator(
      env, env.world > 1 ? resolve_device(device, env.local_rank, env.world, "--device") : torch::Device(torch::kCPU));
}

// ", MFU X %" beside a step time, on a GPU (the trainers' mfu is 0 on the CPU).
static std::string mfu_text(double mfu) {
  char b[32] = "";
  if (mfu > 0) std::snprintf(b, sizeof b, ", MFU %.1f %%", 100 * mfu);
  return b;
}

// " (predicted X GiB)" beside a measured peak, when a memory plan predicted one.
static std::string predicted_peak_text(double gib) {
  char b[48] = "";
  if (gib > 0) std::snprintf(b, sizeof b, " (predicted %.1f GiB)", gib);
  return b;
}

void add_train(CLI::App& app, int& exit_code) {
  auto* train = app.add_subcommand("train", "Train a model");
  train->require_subcommand(1);
  auto c = std::make_shared<SftConfig>();
  if (const char* res = std::getenv("GC_RES")) c->res = res;  // the Python trainer's environment override
  auto* s = train->add_subcommand(
      "sft", "Full-parameter SFT with the gc_sem_cond adapter and per-cell text (the flags of gc25d/train.py)");
  bind_fields(s, c, SftConfig::fields());
  s->callback([c, s, &exit_code] {
    c->memory.given = given_flags(*s, SftConfig::fields());  // the memory plan keeps these (docs/planner.md)
    const auto env = LaunchEnv::from_env();                  // torchrun / Slurm; none: one process
    const auto comm = communicator_for(env, c->compute.device);
    const auto sum = train_sft(*c, *comm, env.local_rank);
    if (env.rank != 0) {
      exit_code = 0;
      return;
    }
    if (sum.steps > sum.start_step)
      std::printf("%s steps %lld..%lld: loss %.4f -> %.4f, %.3f s/step%s; last export %s%s%s\n",
                  sum.stopped ? "stopped by a signal after" : "trained", static_cast<long long>(sum.start_step + 1),
                  static_cast<long long>(sum.steps), sum.first_loss, sum.last_loss, sum.s_per_step,
                  mfu_text(sum.mfu).c_str(), sum.last_export.empty() ? "(none)" : sum.last_export.c_str(),
                  sum.state_dir.empty() ? "" : "; state ", sum.state_dir.c_str());
    exit_code = 0;  // a signal stop too: the state is saved, a scheduler may re-queue the job
  });
  add_train_causal(*train, exit_code);
  add_train_distill(*train, exit_code);
}

void add_train_causal(CLI::App& train, int& exit_code) {
  auto c = std::make_shared<CausalConfig>();
  auto* s = train.add_subcommand("causal",
                                 "Causal LoRA on a frozen base (Wan2.x or MiniMax-H3, from the data root and "
                                 "the weights) with diffusion forcing on block-causal 6-chunk spans (the "
                                 "flags of rtcwm/train/train.py)");
  bind_fields(s, c, CausalConfig::fields());
  s->callback([c, s, &exit_code] {
    c->memory.given = given_flags(*s, CausalConfig::fields());  // the memory plan keeps these (docs/planner.md)
    const auto env = LaunchEnv::from_env();                     // torchrun / Slurm; none: one process
    const auto comm = communicator_for(env, c->compute.device);
    const auto sum = train_causal(*c, *comm, env.local_rank);
    if (env.rank == 0 && sum.steps > sum.start_step)
      std::printf("%s steps %lld..%lld of %lld: loss %.4f -> %.4f, %.3f s/step%s, peak %.1f GiB%s; last LoRA %s\n",
                  sum.stopped ? "stopped by a signal after" : "trained", static_cast<long long>(sum.start_step + 1),
                  static_cast<long long>(sum.steps), static_cast<long long>(sum.total_steps), sum.first_loss,
                  sum.last_loss, sum.s_per_step, mfu_text(sum.mfu).c_str(), sum.peak_mem_gb,
                  predicted_peak_text(sum.predicted_peak_gb).c_str(), sum.last_lora.c_str());
    else if (env.rank == 0 && !sum.stopped)
      std::printf("nothing to train: %s is at step %lld of %lld\n", c->out.c_str(), static_cast<long long>(sum.steps),
                  static_cast<long long>(sum.total_steps));
    exit_code = 0;  // a signal stop too: LoRA and state are saved, a scheduler may re-queue the job
  });
}

void add_train_distill(CLI::App& train, int& exit_code) {
  auto c = std::make_shared<DistillConfig>();
  auto* s = train.add_subcommand("distill",
                                 "Few-step causal student (Self-Forcing's DMD with KV-cache rollouts): student and "
                                 "critic as two LoRAs on one frozen base that is also the teacher (docs/distill.md)");
  bind_fields(s, c, DistillConfig::fields());
  s->callback([c, s, &exit_code] {
    c->memory.given = given_flags(*s, DistillConfig::fields());  // the memory plan keeps these (docs/planner.md)
    const auto env = LaunchEnv::from_env();                      // torchrun / Slurm; none: one process
    const auto comm = communicator_for(env, c->compute.device);
    const auto sum = train_distill(*c, *comm, env.local_rank);
    if (env.rank == 0 && sum.steps > sum.start_step)
      std::printf(
          "%s steps %lld..%lld of %lld: critic loss %.4g -> %.4g, %.3f s/step%s, peak %.1f GiB%s; last "
          "student %s\n",
          sum.stopped ? "stopped by a signal after" : "trained", static_cast<long long>(sum.start_step + 1),
          static_cast<long long>(sum.steps), static_cast<long long>(sum.total_steps), sum.critic_losses.front(),
          sum.critic_losses.back(), sum.s_per_step, mfu_text(sum.mfu).c_str(), sum.peak_mem_gb,
          predicted_peak_text(sum.predicted_peak_gb).c_str(), sum.last_lora.c_str());
    else if (env.rank == 0 && !sum.stopped)
      std::printf("nothing to train: %s is at step %lld of %lld\n", c->out.c_str(), static_cast<long long>(sum.steps),
                  static_cast<long long>(sum.total_steps));
    exit_code = 0;  // a signal stop too: both LoRAs and the state are saved, a scheduler may re-queue the job
  });
}

}  // namespace vdt::cli
