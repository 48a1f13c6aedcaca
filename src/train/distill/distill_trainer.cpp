// The distillation trainer in the shape of the other two: build_* set-up, then the one training loop
// (train/loop/train_loop.h) over this trainer's step, log, validation and files.
#include "train/distill/distill_trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/stop_signal.h"
#include "data/data_root.h"
#include "diffusion/dmd.h"
#include "diffusion/flow_match.h"
#include "distributed/activation_checkpoint.h"
#include "distributed/fp8_blocks.h"
#include "model/denoiser_registry.h"
#include "model/kernels/fused_ops.h"
#include "model/lora.h"
#include "model/weights_io.h"
#include "train/causal/causal_trainer.h"
#include "train/distill/distill_state.h"
#include "train/distill/distill_step.h"
#include "generate/generation_model.h"
#include "generate/model_inputs.h"
#include "train/plan/startup_plan.h"

namespace vdt {
namespace {
namespace fs = std::filesystem;

// The base: the data root's family at the preset of --weights' shapes, or --model (as the causal trainer resolves it).
void resolve_base(DistillRun& r) {
  const std::string dataset_json = (fs::path(r.cfg.data_root) / "dataset.json").string();
  const std::string family = parse_dataset_json(dataset_json).model_family;
  std::string detected;
  if (!r.cfg.weights.empty())
    detected = detect_base(SafetensorsSet::open(weight_files(r.cfg.weights, "--weights"))).second;
  if (r.cfg.model.empty()) {
    VDT_CHECK(!detected.empty() && detected != "custom", "--model is needed: ",
              r.cfg.weights.empty() ? std::string("a random base (--random-init) has no shapes to read it from")
                                    : "--weights " + r.cfg.weights + " match no preset",
              "\n---> HINT: pass --model with a ", family, " preset");
    r.cfg.model = detected;
  }
  VDT_CHECK(denoiser_family(r.cfg.model) == family, "--model ", r.cfg.model, " is a ", denoiser_family(r.cfg.model),
            " base, but ", dataset_json, " says model_family ", family);
  VDT_CHECK(detected.empty() || detected == "custom" || detected == r.cfg.model, "--model ", r.cfg.model,
            " disagrees with --weights ", r.cfg.weights, " (the ", detected, " preset)");
  VDT_CHECK(r.cfg.picture1 == "native" || takes_picture1(r.cfg.model), "--picture1 2048 applies to a MiniMax-H3 base");
}

void build_data(DistillRun& r) {
  if (r.cfg.chunk_frames == 0) r.cfg.chunk_frames = natural_chunk_frames(r.cfg.model);
  CausalDataConfig dc;
  dc.root = r.cfg.data_root, dc.text_table = r.cfg.text_table, dc.span_frames = r.cfg.chunks * r.cfg.chunk_frames;
  dc.val_clips = r.cfg.val_clips, dc.max_samples = r.cfg.max_samples, dc.seed = r.cfg.random.seed;
  dc.picture1 = r.cfg.picture1;
  r.ds = std::make_unique<CausalDataset>(dc);
  VDT_CHECK(!r.ds->train().empty(), r.cfg.data_root, ": no prompt window of ", dc.span_frames,
            " frames (--chunks x --chunk-frames) outside the --val-clips clips");
}

// The memory plan covers the student update's exit-step graph (one block-causal window of the rollout's frames, as a
// causal LoRA step keeps) and the critic's update (a LoRA step over the same rows); the teacher's and the critic's
// scoring passes and the rollout's other steps keep nothing.
void plan_distill_memory(DistillRun& r) {
  const auto& in = r.ds->info();
  const int64_t frames = r.cfg.chunks * r.cfg.chunk_frames;
  RunShape shape;
  shape.training = "lora", shape.chunks = r.cfg.chunks;
  shape.video_rows = frames * (in.latent_h / 2) * (in.latent_w / 2) +
                     r.model->extra_rows(frames, in.latent_h, in.latent_w, r.cfg.chunk_frames);
  shape.text_len = in.text_len, shape.text_rows = r.ds->max_text_rows(), shape.world = r.ctx->world;
  if (r.ctx->world > 1 && r.cfg.shard_mode() != DistillConfig::ShardBase::off)
    shape.shard_ranks = std::min(r.ctx->comm.local_world(), r.ctx->world);
  auto planned = plan_memory(*r.model, r.ctx->device, shape, r.flags);
  r.knobs = planned.knobs, r.plan = std::move(planned.plan);
  if (r.plan) record_knobs(r.knobs, r.cfg.compute, r.cfg.memory, nullptr, &r.cfg.attention);
}

void build_model(DistillRun& r) {
  resolve_lora_shapes(r.cfg);
  r.model = build_base(r.cfg.model, r.cfg.weights, r.cfg.random.seed, r.ctx->device, r.ctx->dtype);
  check_data_matches(*r.model, r.ds->info().latent_channels, r.ds->info().text_dim, r.cfg.data_root + "/dataset.json",
                     "--model " + r.cfg.model);
  fit_side_streams(*r.model, *r.ds, r.cfg.chunks * r.cfg.chunk_frames, r.cfg.chunk_frames);
  const auto targets = r.model->lora_targets();
  // One base, LoRA sets on it: the student (the default set, first: it freezes the base), the critic (B = 0), and
  // with --teacher-lora a frozen teacher set.
  r.student = attach_lora(*r.model, {r.cfg.lora_rank, r.cfg.lora_alpha, targets}, r.cfg.random.seed, kStudentSet);
  r.critic = attach_lora(*r.model, {r.cfg.critic_rank, r.cfg.critic_alpha, targets}, r.cfg.random.seed + 1, kCriticSet);
  if (!r.cfg.teacher_lora.empty()) {
    const auto w = lora_for_model(*r.model, read_lora(r.cfg.teacher_lora), r.cfg.teacher_lora);
    for (auto& [n, p] : attach_lora(*r.model, {w.rank, w.alpha, targets}, 0, kTeacherSet)) p.set_requires_grad(false);
    load_lora(*r.model, w, r.cfg.teacher_lora, kTeacherSet);
    r.teacher_role = kTeacherSet;
  }
  set_active_lora(*r.model, kStudentSet);
  for (const auto& p : r.model->parameters()) r.base_params += p.requires_grad() ? 0 : p.numel();
  {
    torch::NoGradGuard ng;
    for (auto* set : {&r.student, &r.critic})
      for (auto& [name, p] : *set) p.set_data(p.detach().to(torch::kFloat32));  // float32 beside the bf16 base
  }
  plan_distill_memory(r);
  r.model->set_causal_kernel(r.knobs.attn);
  CheckpointOptions co = r.knobs.checkpoint_options();  // always checkpointed: block or selective
  if (r.ctx->world > 1 && r.cfg.shard_mode() != DistillConfig::ShardBase::off) {  // as the causal trainer: per node
    const int node = r.ctx->comm.local_world();
    if (node < r.ctx->world) r.node_comm = r.ctx->comm.split(node);
    r.shards = std::make_unique<BlockShards>(r.model->block_modules(), r.node_comm ? *r.node_comm : r.ctx->comm);
    auto* shards = r.shards.get();
    co.before = [shards](torch::nn::Module& b) { shards->gather(b); };
    co.after = [shards](torch::nn::Module& b) { shards->release(b); };
  }
  enable_block_checkpointing(*r.model, co);
  if (const auto fp8 = r.knobs.fp8; fp8 != Fp8Mode::off) {
    const auto what = enable_fp8_linears(*r.model, fp8, fp8_block_indices(r.model->block_modules().size()), !r.shards);
    if (r.ctx->rank == 0) std::printf("[fp8] %s\n", what.c_str());
  }
  r.model->train();
  const auto& schedule = flow_schedule(r.model->family());
  r.round_timestep = schedule.round_model_timestep;
  r.shift = r.cfg.shift > 0 ? r.cfg.shift : schedule.sample_shift;
  // vdt's guidance convention: Self-Forcing's cond + 3 (cond - uncond) is 4 here; MiniMax-H3 is guidance-distilled.
  r.teacher_cfg = r.cfg.teacher_cfg > 0 ? r.cfg.teacher_cfg : r.model->family() == "h3" ? 1.0 : 4.0;
  r.student_steps = r.cfg.student_step_list();
  r.student_t = student_timesteps(r.student_steps, r.shift);
}

// AdamW of each LoRA, replicated on every rank (gradients all-reduced once backward has finished).
void build_update(DistillRun& r) {
  auto make = [&](const NamedTensors& params, double lr) {
    GradSyncOptions o;
    o.groups = {{"lora", [](const std::string&) { return true; }, lr, r.cfg.weight_decay}};
    o.adamw.beta1 = r.cfg.beta1, o.adamw.beta2 = r.cfg.beta2, o.adamw.state_dtype = torch::kFloat32;
    o.reduce_after_backward = true;  // the student's LoRA is used once per chunk of the rollout
    auto sync = make_grad_sync(params, o, r.ctx->comm);
    sync->attach(params);
    return sync;
  };
  r.student_sync = make(r.student, r.cfg.lr);
  r.critic_sync = make(r.critic, r.cfg.critic_lr);
}

// One mean step's model FLOPs (Denoiser::train_flops: a forward is half a frozen-base step): the rollouts (every
// student step up to the exit, the commit), the exit steps' backward, the teacher's passes and the critic's.
double mean_step_tflop(const DistillRun& r) {
  WindowShape w;
  const auto& in = r.ds->info();
  w.text_len = in.text_len, w.frames = r.cfg.chunks * r.cfg.chunk_frames, w.latent_h = in.latent_h;
  w.latent_w = in.latent_w, w.chunk_frames = r.cfg.chunk_frames;
  w.cond_rows = r.ds->picture1_rows(), w.cond_variant = r.cfg.picture1;
  const double causal = r.model->train_flops(w, true) / 2;  // one forward of the block-causal clip
  if (!r.cfg.all_causal) w.chunk_frames = 0;
  const double full = r.model->train_flops(w, true) / 2;  // one forward of the clip as teacher and critic see it
  const double passes = (static_cast<double>(r.student_t.size()) - 1) / 2 + 1;  // the mean exit index's, + 1
  const double rollout = (passes + 1) * causal;                                 // + the commit
  const double critic = rollout + 2 * full;                                     // forward and input backward
  const double student = rollout + causal + full * (r.teacher_cfg != 1.0 ? 3 : 2);
  return (critic + student / static_cast<double>(r.cfg.critic_ratio)) / 1e12;
}

struct StepStats {
  double critic_loss = 0, student_loss = std::numeric_limits<double>::quiet_NaN(), dmd_grad_norm = 0;
  double critic_norm = 0, student_norm = 0;
  int64_t exit_index = 0, chunks = 0;
  bool stop = false;
};

// An update: reduce the loss over the ranks, clip, step (skipped on a non-finite loss or norm).
torch::Tensor reduce_clip_step(DistillRun& r, GradSync& sync, torch::Tensor* loss) {
  sync.after_backward();
  auto norm = sync.clip_grad_norm(r.cfg.grad_clip);
  sync.step((~torch::isfinite(norm) | ~torch::isfinite(*loss)).to(torch::kFloat32));
  return norm;
}

StepStats distill_step(DistillRun& r, int64_t step) {
  StepStats st;
  const auto d = draw_distill(r.cfg.random.seed, step, r.ctx->rank, static_cast<int64_t>(r.student_t.size()),
                              r.cfg.rollout_min_chunks(), r.cfg.chunks, r.shift);
  st.exit_index = d.exit_index, st.chunks = d.chunks;
  const bool student = r.student_step(step);
  std::vector<torch::Tensor> reduced_in, local;
  // 1) the student update (every --critic-ratio steps): rollout with the exit step's graph, DMD loss, update, EMA
  if (student) {
    auto s = student_loss_backward(r, step, d);
    local.push_back(reduce_clip_step(r, *r.student_sync, &s.loss));
    local.push_back(s.dmd_grad_norm);
    reduced_in.push_back(s.loss);
    ++r.student_updates;
    if (r.cfg.ema > 0 && step >= r.cfg.ema_start) {  // Self-Forcing's EMA: a copy at its start step, then a lerp
      torch::NoGradGuard ng;
      if (r.ema.empty())
        for (const auto& [n, p] : r.student) r.ema.emplace_back(n, p.detach().clone());
      else
        for (size_t i = 0; i < r.ema.size(); ++i) r.ema[i].second.lerp_(r.student[i].second, 1.0 - r.cfg.ema);
    }
  }
  // 2) the critic update (every step): a rollout without gradients, the critic's flow-matching loss
  auto c = critic_loss_backward(r, step, d);
  local.push_back(reduce_clip_step(r, *r.critic_sync, &c.loss));
  ++r.critic_updates;
  reduced_in.insert(reduced_in.begin(), c.loss);
  // 3) the step's one host sync: the losses over the ranks, the norms, the stop agreement
  const auto h = r.ctx->to_host(r.ctx->all_reduce_step(reduced_in), local);
  st.critic_loss = h.mean[0], st.stop = h.stop;
  if (student) st.student_loss = h.mean[1], st.student_norm = h.local[0], st.dmd_grad_norm = h.local[1];
  st.critic_norm = h.local.back();
  return st;
}

std::string startup_table(const DistillRun& r) {
  int64_t s = 0, c = 0;
  for (const auto& [n, p] : r.student) s += p.numel();
  for (const auto& [n, p] : r.critic) c += p.numel();
  std::string times;
  for (const auto t : r.student_t) times += (times.empty() ? "" : ", ") + string_format("%.1f", t);
  std::string t = string_format(
      "vdt train distill\n"
      "  model %s%s%s  device %s  precision %s  world %d (%s)\n"
      "  one resident base (%.1fM frozen): student = base + LoRA rank %lld (%.2fM), critic = base + LoRA rank %lld "
      "(%.2fM, B = 0), teacher = %s, guidance %s against the null prompt; teacher and critic %s\n"
      "  student steps %s -> timesteps %s (shift %s); rollout %lld..%lld chunks x %lld frames; history %s\n"
      "  steps %lld: critic every step (lr %s), student every %lld (lr %s); AdamW (%s, %s) wd %s, clip %s; EMA %s "
      "from step %lld; save every %lld; %s\n"
      "  data %s: %zu prompt windows, %zu val\n",
      r.cfg.model.c_str(), r.cfg.weights.empty() ? " (random base)" : " ", r.cfg.weights.c_str(),
      r.ctx->device.str().c_str(), r.cfg.compute.precision.c_str(), r.ctx->world, r.ctx->comm.describe().c_str(),
      r.base_params / 1e6, static_cast<long long>(r.cfg.lora_rank), s / 1e6, static_cast<long long>(r.cfg.critic_rank),
      c / 1e6, r.teacher_role == kNoLora ? "the base alone" : ("base + " + r.cfg.teacher_lora).c_str(),
      py_float(r.teacher_cfg).c_str(), r.cfg.all_causal ? "block-causal (--all-causal)" : "bidirectional",
      r.cfg.student_steps.c_str(), times.c_str(), py_float(r.shift).c_str(),
      static_cast<long long>(r.cfg.rollout_min_chunks()), static_cast<long long>(r.cfg.chunks),
      static_cast<long long>(r.cfg.chunk_frames), r.cfg.history.c_str(), static_cast<long long>(r.cfg.steps),
      py_float(r.cfg.critic_lr).c_str(), static_cast<long long>(r.cfg.critic_ratio), py_float(r.cfg.lr).c_str(),
      py_float(r.cfg.beta1).c_str(), py_float(r.cfg.beta2).c_str(), py_float(r.cfg.weight_decay).c_str(),
      py_float(r.cfg.grad_clip).c_str(), py_float(r.cfg.ema).c_str(), static_cast<long long>(r.cfg.ema_start),
      static_cast<long long>(r.cfg.save_every), r.resume_how.c_str(), r.cfg.data_root.c_str(), r.ds->train().size(),
      r.ds->val().size());
  if (r.lora_start.rfind("fresh", 0) == 0)
    t += "  STUDENT FRESH: a new student LoRA (B = 0): the student starts as the base, not a causal model; pass a "
         "`vdt train causal` LoRA with --init-lora\n";
  else
    t += "  student from " + r.lora_start + "\n";
  t += "  flags " + changed_fields(r.cfg, DistillConfig::fields()) + "\n";
  if (r.plan)
    for (const auto& line : r.plan->table_lines()) t += "  " + line + "\n";
  return t;
}

void open_logs(DistillRun& r) {
  if (r.ctx->rank != 0) return;
  RunLogSpec spec;
  spec.dir = r.cfg.out, spec.format = LogFormat::csv;
  spec.train_columns = {"step",          "critic_loss",      "student_loss",
                        "dmd_grad_norm", "critic_grad_norm", "student_grad_norm",
                        "exit_index",    "chunks",           "sec"};
  spec.val_columns = {"step", "window", "chunk_s"};
  spec.table = startup_table(r);
  auto args = nlohmann::ordered_json::parse(r.cfg.to_json());
  args["lora_start"] = r.lora_start;
  if (r.plan) args["memory_plan"] = plan_json(*r.plan);
  spec.files = {{"config.json", args.dump(1)}};
  spec.hparams = fields_to_json(r.cfg, DistillConfig::fields(), JsonValues::typed);
  spec.hparam_metrics = {"train/critic_loss", "train/student_loss"};
  r.log.open(spec, r.start_step);
}

class DistillLoop final : public LoopTrainer {
 public:
  DistillLoop(DistillRun& r, DistillSummary& sum) : r_(r), sum_(sum) {}
  StepResult train_step(int64_t step) override {
    st_ = distill_step(r_, step);
    sum_.critic_losses.push_back(st_.critic_loss), sum_.student_losses.push_back(st_.student_loss);
    sum_.dmd_grad_norms.push_back(st_.dmd_grad_norm), sum_.exit_indices.push_back(st_.exit_index);
    // The loop's non-finite check sees both losses.
    const double loss = st_.critic_loss + (std::isnan(st_.student_loss) ? 0.0 : st_.student_loss);
    return {loss, st_.critic_norm, st_.stop};
  }
  void log_step(int64_t step, const StepResult&, double step_time, double elapsed) override {
    if (r_.ctx->rank != 0) return;
    nlohmann::json row = {{"step", step},
                          {"critic_loss", st_.critic_loss},
                          {"critic_grad_norm", st_.critic_norm},
                          {"exit_index", st_.exit_index},
                          {"chunks", st_.chunks},
                          {"sec", elapsed}};
    RunLog::Scalars tb = {{"train/critic_loss", st_.critic_loss},
                          {"train/critic_grad_norm", st_.critic_norm},
                          {"train/exit_index", static_cast<double>(st_.exit_index)},
                          {"train/step_time", step_time}};
    std::string student = "";
    if (!std::isnan(st_.student_loss)) {
      row["student_loss"] = st_.student_loss, row["dmd_grad_norm"] = st_.dmd_grad_norm;
      row["student_grad_norm"] = st_.student_norm;
      tb.push_back({"train/student_loss", st_.student_loss}), tb.push_back({"train/dmd_grad_norm", st_.dmd_grad_norm});
      tb.push_back({"train/student_grad_norm", st_.student_norm});
      student = string_format(" student=%.4g dmd_gnorm=%s", st_.student_loss, fmt_gnorm(st_.dmd_grad_norm).c_str());
    }
    r_.log.step(step, row, tb,
                string_format("step %lld/%lld critic=%.4g gnorm=%s%s exit=%lld chunks=%lld %.2fs/step",
                              static_cast<long long>(step), static_cast<long long>(r_.cfg.steps), st_.critic_loss,
                              fmt_gnorm(st_.critic_norm).c_str(), student.c_str(),
                              static_cast<long long>(st_.exit_index), static_cast<long long>(st_.chunks), step_time));
  }
  void validate(int64_t step) override;
  void save(int64_t step, SaveWhy) override { sum_.last_lora = save_distill(r_, step); }
  void stopped(int64_t step) override {
    if (r_.ctx->rank == 0)
      std::printf(
          "[stop] %s: stopped after step %lld of %lld; both LoRAs and the state are saved. Re-run the same "
          "command to continue.\n",
          StopOnSignal::signal_name(), static_cast<long long>(step), static_cast<long long>(r_.cfg.steps));
  }
  [[noreturn]] void fail_non_finite(int64_t step, double loss) override {
    r_.ctx->fail_non_finite(step, loss,
                            "The last student LoRA " + (sum_.last_lora.empty() ? "(none yet)" : sum_.last_lora) +
                                " and its state are intact.",
                            "lower --lr / --critic-lr, or start the student from a `vdt train causal` LoRA");
  }

 private:
  DistillRun& r_;
  DistillSummary& sum_;
  StepStats st_;
};

// The preview: val window 0 generated by the student at its steps (every chunk exiting at the last step), the seconds
// per chunk into the val log and TensorBoard.
void DistillLoop::validate(int64_t step) {
  if (r_.ds->val().empty()) return;
  torch::NoGradGuard ng;
  ActiveLora student(*r_.model, kStudentSet);
  DistillDraws d;
  d.chunks = r_.cfg.chunks, d.exit_index = static_cast<int64_t>(r_.student_t.size()) - 1;
  const auto w = distill_window(r_, 0, d.chunks * r_.cfg.chunk_frames, /*val=*/0);
  const auto t0 = std::chrono::steady_clock::now();
  const auto x = student_rollout(r_, w, d, false, 0, 2);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / d.chunks;
  if (r_.ctx->rank != 0) return;
  r_.log.validation(step, std::vector<nlohmann::json>{nlohmann::json{{"step", step}, {"window", w.id}, {"chunk_s", s}}},
                    {{"val/stream_chunk_s", s}},
                    string_format("[val] step %lld: %s streamed by the student, %.3f s a chunk (rms %.3f)",
                                  static_cast<long long>(step), w.id.c_str(), s,
                                  x.video.to(torch::kFloat32).square().mean().sqrt().item<double>()));
}

}  // namespace

DistillSummary train_distill(const DistillConfig& cfg) {
  auto single = make_single_rank();
  return train_distill(cfg, *single, 0);
}

std::unique_ptr<DistillRun> build_distill_run(const DistillConfig& cfg, Communicator& comm, int device_index) {
  cfg.validate();
  auto r = std::make_unique<DistillRun>();
  r->cfg = cfg;
  r->flags = cfg.memory_flags();
  r->knobs = r->flags.knobs;
  r->ctx = std::make_unique<RunContext>(comm, cfg.compute.device, device_index,
                                        r->knobs.precision == Precision::fp32 ? torch::kFloat32 : torch::kBFloat16);
  check_fp8_device(r->knobs.fp8, r->ctx->device, "--fp8");
  if (r->ctx->rank == 0) r->lock = hold_run_dir(cfg.out, "--out");
  resolve_base(*r);
  build_data(*r);
  build_model(*r);
  build_update(*r);
  resume_distill(*r);
  return r;
}

std::pair<double, double> run_distill_step(DistillRun& r, int64_t step) {
  const auto st = distill_step(r, step);
  return {st.critic_loss, st.student_loss};
}

double distill_step_tflop(const DistillRun& r) { return mean_step_tflop(r); }

DistillSummary train_distill(const DistillConfig& cfg, Communicator& comm, int device_index) {
  StopOnSignal stop_on_signal;  // SIGTERM / SIGINT: finish the step, save, exit 0 (a re-run continues)
  const kernels::FusedKernelsScope fused(cfg.compute.fused());
  auto run = build_distill_run(cfg, comm, device_index);
  DistillRun& r = *run;
  open_logs(r);
  r.ctx->reset_peak_memory();
  DistillSummary sum;
  sum.start_step = sum.steps = r.start_step, sum.total_steps = cfg.steps;
  sum.resume_how = r.resume_how, sum.lora_start = r.lora_start, sum.base_params = r.base_params;
  for (const auto& [n, p] : r.student) sum.student_params += p.numel();
  for (const auto& [n, p] : r.critic) sum.critic_params += p.numel();
  sum.tflop_per_step = mean_step_tflop(r);
  if (r.plan) sum.predicted_peak_gb = static_cast<double>(r.plan->peak_bytes) / double(int64_t{1} << 30);
  DistillLoop loop(r, sum);
  static_cast<LoopResult&>(sum) = run_training_loop(
      *r.ctx,
      {.start_step = r.start_step, .last_step = cfg.steps, .val_every = cfg.val_every, .save_every = cfg.save_every},
      loop);
  std::fflush(stdout);
  sum.s_per_step = sum.steps > r.start_step ? sum.seconds / static_cast<double>(sum.steps - r.start_step) : 0;
  sum.peak_mem_gb = r.ctx->peak_memory_gb();
  sum.mfu = r.ctx->mfu(sum.tflop_per_step, sum.s_per_step);
  auto host = [](const NamedTensors& in, NamedTensors& out) {
    std::vector<torch::Tensor> ts;
    for (const auto& [n, p] : in) out.emplace_back(n, p.detach().to(torch::kCPU).clone()), ts.push_back(p);
    return RunContext::checksum(ts);
  };
  sum.student_crc = host(r.student, sum.student);
  sum.critic_crc = host(r.critic, sum.critic);
  host(r.ema, sum.ema);
  return sum;
}

}  // namespace vdt
