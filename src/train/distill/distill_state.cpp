// The distillation run's files and resume (distill_state.h).
#include "train/distill/distill_state.h"

#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/state_slots.h"
#include "generate/lora_file.h"
#include "model/denoiser_registry.h"
#include "model/lora.h"
#include "train/checkpoint/checkpointer.h"
#include "train/loop/config_fields.h"

namespace vdt {
namespace {
namespace fs = std::filesystem;

constexpr const char* kTrainer = "vdt train distill";

// A LoRA set's factors under a prefix in the slot ("student.", "critic.", "ema.").
void add_prefixed(NamedTensors& out, const std::string& prefix, const NamedTensors& in) {
  for (const auto& [n, t] : in) out.emplace_back(prefix + n, t.detach());
}
// An update path's optimizer state ("exp_avg.<name>", ...) with the name prefixed.
void add_prefixed_optimizer(NamedTensors& out, const std::string& prefix, const NamedTensors& in) {
  for (const auto& [k, t] : in) {
    const auto dot = k.find('.');
    out.emplace_back(k.substr(0, dot + 1) + prefix + k.substr(dot + 1), t);
  }
}

// The student (or its EMA) in the causal LoRA format: bf16 factors with kohya's per-module alpha, the causal
// trainer's metadata, and what makes it a few-step student: its steps and the sampler they were trained with.
void write_student(const DistillRun& r, const std::string& path, int64_t step, const NamedTensors& lora, bool ema) {
  const auto info = r.model->lora_base_info();
  LoraFileMeta m;
  m.base = info.base, m.model = r.cfg.model, m.text_handling = info.text_handling, m.weights = r.cfg.weights;
  m.step = step, m.objective = "dmd", m.span_chunks = r.cfg.chunks, m.chunk_frames = r.cfg.chunk_frames;
  m.rank = r.cfg.lora_rank, m.alpha = r.cfg.lora_alpha, m.seed = r.cfg.random.seed, m.val_clips = r.cfg.val_clips;
  m.picture1 = r.cfg.picture1;
  m.student_steps = static_cast<int64_t>(r.student_t.size());
  m.student_timesteps = r.student_t;  // on the base's shifted grid
  m.student_cfg = 1.0;                // the teacher's guidance is distilled into the student
  m.student_sampler = "renoise";
  m.ema = ema ? r.cfg.ema : 0.0;
  save_lora_file(path, m, lora);
}

void write_students(const DistillRun& r, int64_t step) {
  write_student(r, distill_lora_path(r.cfg.out, step, false), step, r.student, false);
  if (!r.ema.empty()) write_student(r, distill_lora_path(r.cfg.out, step, true), step, r.ema, true);
}

// Exactly from a slot: both LoRAs, both AdamW states, the EMA, the update counts and the step.
void resume_exactly(DistillRun& r, const LoadedCheckpoint& ck) {
  const auto& st = ck.train_state;
  const std::string cfg_json = st.value("model_config", std::string());
  const std::string differs = cfg_json.empty() ? "" : r.model->architecture_difference(cfg_json);
  VDT_CHECK(differs.empty(), ck.slot, ": the state's base is not this run's --model ", r.cfg.model, ": ", differs,
            "\n---> HINT: re-run with the --model the run was started with, or use another --out");
  const int64_t step = st.at("step").get<int64_t>();
  r.student_updates = st.at("student_updates").get<int64_t>();
  r.critic_updates = st.at("critic_updates").get<int64_t>();
  auto load = [&](GradSync& sync, const NamedTensors& params, const std::string& prefix, int64_t updates) {
    for (const auto& [name, p] : params) {
      const auto t = ck.full("weight", prefix + name);
      VDT_CHECK(t.sizes() == p.sizes(), ck.slot, ": ", prefix, name, " is ", t.sizes(), ", this run's is ", p.sizes(),
                " (--lora-rank / --critic-rank)");
    }
    sync.load([&](const std::string& kind, const std::string& name) { return ck.full(kind, prefix + name); }, updates,
              ck.slot);
  };
  load(*r.student_sync, r.student, "student.", r.student_updates);
  load(*r.critic_sync, r.critic, "critic.", r.critic_updates);
  r.ema.clear();
  if (st.value("ema", false)) {
    torch::NoGradGuard ng;
    for (const auto& [name, p] : r.student)
      r.ema.emplace_back(name, ck.full("weight", "ema." + name)  // the slot's tensor may map the file: copied
                                   .to(p.device(), torch::kFloat32, /*non_blocking=*/false, /*copy=*/true)
                                   .reshape(p.sizes()));
  }
  r.start_step = step;
  r.state_slot = ck.slot;
  r.lora_start = st.value("lora_start", std::string("continued"));
  r.resume_how = "exact resume after step " + std::to_string(step) + " from " + ck.slot + " (both LoRAs, both AdamW " +
                 "states, " + (r.ema.empty() ? std::string("no EMA yet") : "the EMA") + ")";
}

}  // namespace

std::string distill_lora_path(const std::string& out, int64_t step, bool ema) {
  char name[64];
  std::snprintf(name, sizeof name, "lora_step%05lld%s.safetensors", static_cast<long long>(step), ema ? "_ema" : "");
  return (fs::path(out) / name).string();
}

void resolve_lora_shapes(DistillConfig& cfg) {
  if (const auto init = cfg.init_lora_file(); !init.empty()) {
    const auto file = lora_shape_for(cfg.model, init);
    VDT_CHECK(cfg.lora_rank < 0 || cfg.lora_rank == file.rank, "--lora-rank ", cfg.lora_rank, " disagrees with ", init,
              ", whose LoRA has rank ", file.rank, "\n---> HINT: leave --lora-rank out");
    VDT_CHECK(cfg.lora_alpha < 0 || cfg.lora_alpha == file.alpha, "--lora-alpha ", py_float(cfg.lora_alpha),
              " disagrees with ", init, ", whose LoRA has alpha ", py_float(file.alpha),
              "\n---> HINT: leave --lora-alpha out");
    cfg.lora_rank = file.rank, cfg.lora_alpha = file.alpha;
  }
  if (cfg.lora_rank < 0) cfg.lora_rank = DistillConfig::kDefaultLoraRank;
  if (cfg.lora_alpha < 0) cfg.lora_alpha = static_cast<double>(cfg.lora_rank);
  if (cfg.critic_rank < 0) cfg.critic_rank = cfg.lora_rank;
  if (cfg.critic_alpha < 0) cfg.critic_alpha = static_cast<double>(cfg.critic_rank);
}

void resume_distill(DistillRun& r) {
  const auto& cfg = r.cfg;
  const bool other = cfg.resume != "auto";
  if (other) {
    const auto mine = load_checkpoint(cfg.out, /*allow_none=*/true, kTrainer, "--out", true, "");
    VDT_CHECK(!mine, "--resume ", cfg.resume, ": --out ", cfg.out, " already holds a run (", mine ? mine->slot : "",
              ")\n---> HINT: re-run without --resume to continue that run, or give a fresh --out");
  }
  auto ck = load_checkpoint(other ? cfg.resume : cfg.out, /*allow_none=*/!other, kTrainer, "--resume",
                            cfg.ignore_corrupt_state, "--ignore-corrupt-state");
  if (ck) {
    const int64_t step = ck->train_state.at("step").get<int64_t>();
    VDT_CHECK(step <= cfg.steps, other ? cfg.resume : cfg.out, ": its state ", ck->slot, " is at step ", step,
              ", past this run's --steps ", cfg.steps, "\n---> HINT: give more --steps, or another --out");
    resume_exactly(r, *ck);
    if (other) r.state_slot.clear();  // another run's slot: this run's saves go into its own --out
    // Killed between the slot and its LoRA files (the student's, then its EMA's): the slot is the unit.
    std::string missing = distill_lora_path(cfg.out, step, false);
    if (fs::exists(missing) && !r.ema.empty()) missing = distill_lora_path(cfg.out, step, true);
    if (!other && step > 0 && !fs::exists(missing)) {
      if (r.ctx->rank == 0) write_students(r, step);
      r.resume_how += "; " + missing + " was missing (the save was cut after the state) and is written from the state";
    }
    if (!other && r.ctx->rank == 0)
      if (const auto old = repair_state_link(cfg.out, ck->slot))
        r.resume_how +=
            "; the state link now points at the newest sealed slot " + fs::path(ck->slot).filename().string();
    return;
  }
  if (const auto init = cfg.init_lora_file(); !init.empty()) {
    set_active_lora(*r.model, kStudentSet);
    load_lora(*r.model, lora_for_model(*r.model, read_lora(init), init), init, kStudentSet);
    r.resume_how = "fresh run, the student from " + init;
    r.lora_start = init;
  } else {
    r.resume_how = "fresh run";
    r.lora_start = "fresh: a new student LoRA (B = 0), no --init-lora";
  }
}

std::string save_distill(DistillRun& r, int64_t step) {
  CheckpointParts parts;
  parts.trainer = kTrainer, parts.step = step, parts.replicated = true;
  const auto s = r.student_sync->state(), c = r.critic_sync->state();
  add_prefixed(parts.update.weights, "student.", s.weights);
  add_prefixed(parts.update.weights, "critic.", c.weights);
  add_prefixed(parts.update.weights, "ema.", r.ema);
  add_prefixed_optimizer(parts.update.optimizer, "student.", s.optimizer);
  add_prefixed_optimizer(parts.update.optimizer, "critic.", c.optimizer);
  parts.train_state = {{"student_updates", r.student_updates},
                       {"critic_updates", r.critic_updates},
                       {"ema", !r.ema.empty()},
                       {"world", r.ctx->world},
                       {"lora_start", r.lora_start},
                       {"model_config", r.model->config_json()}};
  parts.config_json = r.cfg.to_json();
  r.state_slot = save_checkpoint(r.cfg.out, r.state_slot, parts, r.ctx->comm);
  const std::string path = distill_lora_path(r.cfg.out, step, false);
  if (r.ctx->rank == 0) {
    write_students(r, step);
    std::printf("[save] %s%s; state %s\n", path.c_str(), r.ema.empty() ? "" : " (+ _ema)", r.state_slot.c_str());
  }
  return path;
}

}  // namespace vdt
