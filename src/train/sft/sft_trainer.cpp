// The SFT trainer, in torchtitan's shape: build_* set-up, then the one training loop (train/loop/train_loop.h) over
// this trainer's step (sft_step, numbered phases), log, validation and files. Gradient sync, clipping and the update
// go through the update path (distributed/grad_sync.h); the model through the base-model seam (model/denoiser.h).
#include "train/sft/sft_trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/file_checksum.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "core/safetensors.h"
#include "core/state_slots.h"
#include "core/stop_signal.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/sft_dataset.h"
#include "diffusion/flow_match.h"
#include "distributed/grad_sync.h"
#include "model/denoiser_registry.h"
#include "model/kernels/fused_ops.h"
#include "model/weights_io.h"
#include "train/checkpoint/export.h"
#include "train/checkpoint/train_state.h"
#include "data/synth_vae.h"
#include "generate/preview.h"
#include "generate/clip_sampling.h"
#include "train/eval/validation.h"
#include "distributed/activation_checkpoint.h"
#include "distributed/fp8_blocks.h"
#include "generate/model_inputs.h"
#include "train/loop/run_context.h"
#include "train/loop/run_dir.h"
#include "train/loop/run_log.h"
#include "train/loop/schedule.h"
#include "train/loop/train_loop.h"
#include "train/plan/startup_plan.h"
#include "train/sft/sft_log.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;
const std::string kCondPrefix = "gc_sem_cond.";

bool is_cond(const std::string& name) { return name.rfind(kCondPrefix, 0) == 0; }

struct SftRun {
  SftConfig cfg;
  std::unique_ptr<RunContext> ctx;
  std::unique_ptr<RunDirLock> lock;  // rank 0: this process owns --output
  std::shared_ptr<SftDataset> train_ds, val_ds;
  std::shared_ptr<SynthVae> preview_vae;  // the root's vae.safetensors (synthetic roots), for --preview_steps
  std::unique_ptr<Loader> loader;
  std::shared_ptr<Denoiser> model;
  SemCondConfig sem;
  std::unique_ptr<GradSync> sync;
  FlowGrid grid;
  torch::Tensor grid_weights;
  RunLog log;
  std::string init_ckpt;
  nlohmann::ordered_json resume_info;   // config.json's model.resume_info: the warm start's load (null without one)
  std::vector<std::string> base_files;  // --model_dir's weight files (empty: --random-init)
  MemoryFlags flags;                    // the memory knobs as the command line gave them (parsed once)
  MemoryKnobs knobs;                    // what the run applies: the flags', then the memory plan's (plan_sft_memory)
  std::optional<Plan> plan;             // the memory plan (none: no budget, --memory auto on the CPU)
  std::string precision_note;           // why the plan chose the precision (--precision left out), else empty
  // data position
  int64_t epoch = 0, epoch_micro = 0, n_micro = 0, micro_counter = 0;
  std::vector<std::vector<int64_t>> epoch_batches;
  Geometry geometry;
  // resume: where this process started, and the slot it must not overwrite (resumed from or last written)
  int64_t start_step = 0, skip_micro = 0;
  std::string resumed_from, state_slot, resume_how;
};

// As the Python trainer logs a step: loss (over the ranks), mse, timestep, the drops and the RMS of the step's last
// micro batch; loss_mean and mse_mean over all its micro batches (loss_mean over the ranks too: the summary's loss).
struct StepStats {
  double loss = 0, mse = 0, timestep = 0, grad_norm = 0, sem_rms = 0, x_rms = 0;
  double loss_mean = 0, mse_mean = 0;
  double text_drop = 0, cond_drop = 0, mask_frac = 0, data_time = 0;
  int64_t micro = 0;
  bool stop = false;  // a stop signal reached some rank
  std::string clips;
};

void build_data(SftRun& r) {
  SftDataConfig dc;
  dc.root = r.cfg.data_root, dc.text_table = r.cfg.text_table, dc.vocab = r.cfg.vocab, dc.res = r.cfg.res;
  dc.text_dropout = r.cfg.text_dropout, dc.cond_dropout = r.cfg.cond_dropout, dc.mask_p = r.cfg.mask_p;
  dc.include_dropped = r.cfg.include_dropped, dc.limit = r.cfg.limit, dc.seed = r.cfg.random.seed;
  dc.split = "train";
  r.train_ds = std::make_shared<SftDataset>(dc);
  // Per-cell text: one prompt per latent frame, checked here (as `vdt data check` does) before any model work.
  const auto cells = sft_cells_problem(r.train_ds->info(), r.cfg.data_root + "/dataset.json");
  VDT_CHECK(cells.empty(), cells);
  VDT_CHECK(r.train_ds->size() > 0, r.cfg.data_root, ": no train clips (after dropping drop rows and --limit)");
  check_no_leak(r.train_ds->root());  // the whole index, whatever --val_every / --val_n
  if (r.cfg.val_every > 0 && r.cfg.val_n > 0) {
    SftDataConfig vc = dc;
    vc.split = "val", vc.limit = r.cfg.val_n, vc.include_dropped = false;
    r.val_ds = std::make_shared<SftDataset>(vc, r.train_ds->text_table());  // no leak: checked above over every row
    if (r.cfg.preview_steps > 0 && r.val_ds->size() > 0 && fs::exists(fs::path(r.cfg.data_root) / "vae.safetensors"))
      r.preview_vae = std::make_shared<SynthVae>(SynthVae::open(r.cfg.data_root));
  }
  const int rank = r.ctx->rank, world = r.ctx->world;
  r.n_micro = static_cast<int64_t>(
      rank_micro_batches(r.cfg.random.seed, 0, r.train_ds->size(), rank, world, r.cfg.batch_size).size());
  VDT_CHECK(r.n_micro > 0, "--batch_size ", r.cfg.batch_size, " exceeds the ", r.train_ds->size(),
            " train clips per rank; lower it");
  r.loader = std::make_unique<Loader>(r.train_ds, r.cfg.batch_size, r.cfg.num_workers, 2, r.ctx->device.is_cuda());
  const auto clips = static_cast<int64_t>(r.train_ds->size());
  r.geometry = {world, r.cfg.grad_accum, r.cfg.batch_size, r.n_micro, clips, r.cfg.random.seed};
}

bool is_warm_start(const std::string& resume) {
  return resume.size() > 12 && resume.substr(resume.size() - 12) == ".safetensors";
}

// The adapter's shape: the vocab's channels, the data's scale, a hidden width from the base's.
SemCondConfig sem_config(const SftConfig& cfg, const SftDataset& ds, int64_t width) {
  SemCondConfig sem;
  sem.vocab = cfg.vocab, sem.vocab_size = sem_vocab_size(cfg.vocab), sem.scale = ds.info().sem_scale;
  sem.hidden = cfg.sem_hidden > 0 ? cfg.sem_hidden : std::min<int64_t>(512, width);
  return sem;
}

// The memory plan (train/plan/startup_plan.h) fills the memory knobs the command line left out, before any weight is
// read or any optimizer state made: it plans on a skeleton of the base in host memory (the shapes and the compute
// dtype are what it counts), so a run nothing fits is refused first. With
// --precision left out, one process takes mixed where a plan fits it and otherwise bf16 (the Python trainer's
// single-process mode: bf16 weights and AdamW moments, no fp32 masters); several processes keep mixed (ZeRO-2 shards
// the masters). The run's config records the result (config.json: what ran).
void plan_sft_memory(SftRun& r) {
  const auto& in = r.train_ds->info();
  RunShape shape;
  shape.video_rows = r.cfg.batch_size * in.latent_frames * (in.latent_h / 2) * (in.latent_w / 2);  // 1x2x2 patches
  shape.text_len = in.text_len, shape.text_rows = r.cfg.batch_size * r.train_ds->max_text_rows();
  shape.world = r.ctx->world, shape.zero2 = r.ctx->world > 1, shape.grad_accum = r.cfg.grad_accum;
  if (r.flags.memory == "auto" && device_memory_info(r.ctx->device).total_bytes <= 0) return;  // no budget: no plan
  std::shared_ptr<Denoiser> skeleton;
  auto plan_at = [&](Precision precision) {
    const auto dtype = precision == Precision::fp32 ? torch::kFloat32 : torch::kBFloat16;  // the compute weights
    if (!skeleton || skeleton->compute_dtype() != dtype) {
      skeleton = make_denoiser(r.cfg.model, torch::TensorOptions().dtype(dtype));
      skeleton->install_sem_cond(sem_config(r.cfg, *r.train_ds, skeleton->width()));
    }
    shape.fp32_masters = precision == Precision::mixed, shape.moment_bytes = precision == Precision::bf16 ? 2 : 4;
    MemoryFlags flags = r.flags;
    flags.knobs.precision = precision;
    return plan_memory(*skeleton, r.ctx->device, shape, flags);
  };
  const auto precision = r.flags.knobs.precision;
  PlannedMemory planned;
  try {
    planned = plan_at(precision);
  } catch (const Error& e) {
    if (precision != Precision::mixed || r.ctx->world > 1) throw;
    std::optional<PlannedMemory> bf16;
    try {
      bf16 = plan_at(Precision::bf16);
    } catch (const Error&) {
    }
    VDT_CHECK(bf16, e.what(), "\n  - --precision bf16 does not fit either");
    VDT_CHECK(!r.flags.precision_given, e.what(), "\n  - --precision bf16 (the Python trainer's single-process mode: ",
              "bf16 weights and AdamW moments, no fp32 masters) fits: ", bf16->plan ? bf16->plan->flags() : "");
    planned = std::move(*bf16);
    r.precision_note =
        "bf16: --precision left out, one process, and mixed (fp32 masters) fits no plan; the Python "
        "trainer's single-process mode (bf16 weights and AdamW moments)";
  }
  r.knobs = planned.knobs, r.plan = std::move(planned.plan);
  if (r.plan) record_knobs(r.knobs, r.cfg.compute, r.cfg.memory);
}

void build_model(SftRun& r) {
  r.base_files = r.cfg.model_dir.empty() ? std::vector<std::string>{} : weight_files(r.cfg.model_dir, "--model_dir");
  const auto& base_files = r.base_files;
  const auto precision = r.knobs.precision;
  const auto master_dtype = precision == Precision::bf16 ? torch::kBFloat16 : torch::kFloat32;
  r.model = make_denoiser(r.cfg.model, torch::TensorOptions().device(r.ctx->device).dtype(master_dtype));
  check_data_matches(*r.model, r.train_ds->info().latent_channels, r.train_ds->info().text_dim,
                     r.cfg.data_root + "/dataset.json", "--model " + r.cfg.model);
  r.sem = sem_config(r.cfg, *r.train_ds, r.model->width());
  r.model->install_sem_cond(r.sem);
  r.model->init_weights(r.cfg.random.seed);  // every parameter from the seed, the adapter included (same on every rank)
  if (!base_files.empty())
    load_weights(*r.model, SafetensorsSet::open(base_files), {.optional_prefixes = {kCondPrefix}});
  if (is_warm_start(r.cfg.resume)) {  // warm start from an export (a plain Wan export leaves the adapter zero)
    auto files = SafetensorsSet::open({r.cfg.resume});
    const auto& meta = files.metadata();
    if (files.contains("gc_sem_cond.patch.weight"))
      VDT_CHECK(meta.count("vocab") && meta.at("vocab") == r.cfg.vocab, "--resume ", r.cfg.resume,
                ": its gc_sem_cond vocab is '", meta.count("vocab") ? meta.at("vocab") : "?",
                "', this run has --vocab ", r.cfg.vocab);
    if (meta.count("res") && meta.at("res") != r.cfg.res)
      std::printf("[resume] note: %s was trained at res %s, this run uses %s (cross-resolution warm start)\n",
                  r.cfg.resume.c_str(), meta.at("res").c_str(), r.cfg.res.c_str());
    const auto rep = load_weights(*r.model, files, {.optional_prefixes = {kCondPrefix}});
    std::printf("[resume] warm start from %s: %zu tensors, gc_sem_cond %s\n", r.cfg.resume.c_str(), rep.loaded.size(),
                rep.kept.empty() ? "loaded" : "kept zero-initialised");
    r.init_ckpt = r.cfg.resume;
    // The Python trainer's load_weights_into_dit report: tensors, whether the adapter came with them, what stayed.
    r.resume_info = {{"n_tensors", rep.loaded.size()},
                     {"has_sem_cond", files.contains("gc_sem_cond.patch.weight")},
                     {"missing", rep.kept},
                     {"res", meta.count("res") ? meta.at("res") : ""},
                     {"ckpt_metadata", meta}};
  }
  // The update path takes the master values (before the cast to the compute dtype); mixed precision keeps fp32
  // masters beside bf16 compute weights, ZeRO-2 shards them over the ranks.
  GradSyncOptions o;
  o.groups = {{"dit", [](const std::string& n) { return !is_cond(n); }, r.cfg.lr, r.cfg.weight_decay},
              {"gc_sem_cond", is_cond, r.cfg.cond_lr, r.cfg.weight_decay}};
  if (precision != Precision::bf16) o.adamw.state_dtype = torch::kFloat32;
  o.fp32_masters = precision == Precision::mixed;
  o.shard_optimizer = true;  // with several ranks
  r.sync = make_grad_sync(named_parameters(*r.model), o, r.ctx->comm);
  if (o.fp32_masters) r.model->to(r.ctx->dtype);
  r.sync->attach(named_parameters(*r.model));
  if (r.knobs.checkpointing != Checkpointing::none) enable_block_checkpointing(*r.model, r.knobs.checkpoint_options());
  if (const auto fp8 = r.knobs.fp8; fp8 != Fp8Mode::off) {  // wraps the checkpointing runner: after it
    const auto what = enable_fp8_linears(*r.model, fp8, fp8_block_indices(r.model->block_modules().size()),
                                         /*hold_frozen=*/false);  // every block weight trains
    if (r.ctx->rank == 0) std::printf("[fp8] %s\n", what.c_str());
  }
  r.model->train();
  r.grid = training_grid();
  r.grid_weights = training_weights(r.grid);
}

TrainerState current_state(const SftRun& r, int64_t step) {
  TrainerState st;
  st.step = step;
  st.pos = {r.epoch, r.epoch_micro, static_cast<uint64_t>(r.micro_counter)};
  st.geometry = r.geometry;
  st.vocab = r.cfg.vocab, st.res = r.cfg.res, st.init_ckpt = r.init_ckpt, st.model = r.cfg.model;
  st.precision = precision_name(r.knobs.precision), st.model_config = r.model->config_json();
  return st;
}

// --resume DIR | auto: weights, optimizer moments and step counts, data position and micro-batch counter from the
// newest complete state slot. A vocab, res or model mismatch is an error naming both values.
void build_resume(SftRun& r) {
  if (r.cfg.resume.empty() || is_warm_start(r.cfg.resume)) return;
  const bool is_auto = r.cfg.resume == "auto";
  auto loaded = load_trainer_state(is_auto ? r.cfg.output : r.cfg.resume, is_auto, r.cfg.ignore_corrupt_state);
  if (!loaded) {
    std::printf("[resume] auto: no complete state in %s; starting from step 0\n", r.cfg.output.c_str());
    return;
  }
  const auto& st = loaded->st;
  const std::string where = "--resume " + loaded->slot;
  for (auto [name, saved, now] :
       {std::tuple{"vocab", st.vocab, r.cfg.vocab}, {"res", st.res, r.cfg.res}, {"model", st.model, r.cfg.model}})
    VDT_CHECK(saved.empty() || saved == now, where, ": the state was trained with --", name, " ", saved,
              ", this run has --", name, " ", now, "\n---> HINT: resume with the same --", name,
              ", or warm start from a step-N.safetensors export");
  const std::string differs = st.model_config.empty() ? "" : r.model->architecture_difference(st.model_config);
  VDT_CHECK(differs.empty(), where, ": the state's architecture is not this run's model: ", differs,
            "\n---> HINT: resume with the --model the state was trained with");
  if (!st.precision.empty() && st.precision != precision_name(r.knobs.precision))
    std::printf(
        "[resume] note: the state was trained with --precision %s, this run uses %s (weights and moments "
        "are converted)\n",
        st.precision.c_str(), precision_name(r.knobs.precision));
  r.sync->load([&](const std::string& kind, const std::string& name) { return loaded->full(kind, name); },
               loaded->optimizer_steps(), where);
  const ResumePoint rp = resume_position(st, r.geometry);
  r.start_step = st.step;
  r.epoch = rp.epoch, r.skip_micro = rp.skip;
  r.micro_counter = static_cast<int64_t>(rp.micro_counter);  // the streams' key: micro_counter * world + rank
  r.init_ckpt = st.init_ckpt;
  r.resumed_from = std::filesystem::canonical(loaded->slot).string();
  r.state_slot = loaded->slot;
  r.resume_how = rp.how;
  std::error_code ec;
  if (r.ctx->rank == 0 && fs::equivalent(run_dir_of(loaded->slot), r.cfg.output, ec))
    if (const auto old = repair_state_link(r.cfg.output, loaded->slot))  // the link lagged behind the newest seal
      std::printf("[resume] %s/state pointed at %s; it now points at %s, the newest sealed slot\n",
                  r.cfg.output.c_str(), old->empty() ? "nothing" : old->c_str(),
                  fs::path(loaded->slot).filename().c_str());
  std::printf("[resume] %s: step %lld, epoch %lld after %lld micro batches (%s); init_ckpt %s\n",
              r.resumed_from.c_str(), static_cast<long long>(st.step), static_cast<long long>(rp.epoch),
              static_cast<long long>(rp.skip), rp.how.c_str(), r.init_ckpt.empty() ? "(base)" : r.init_ckpt.c_str());
  if (!(st.geometry == r.geometry))
    std::printf("[resume] saved geometry %s != this run's %s\n", st.geometry.to_json().dump().c_str(),
                r.geometry.to_json().dump().c_str());
}

// Starts the next epoch's micro batches (the permutation is a function of (seed, epoch)).
void start_epoch(SftRun& r, int64_t skip) {
  r.epoch_batches =
      rank_micro_batches(r.cfg.random.seed, r.epoch, r.train_ds->size(), r.ctx->rank, r.ctx->world, r.cfg.batch_size);
  r.loader->start_epoch(r.epoch, r.epoch_batches, skip);
  r.epoch_micro = skip;
}

// The next micro batch of the epoch; at its end, the first of the next epoch unless `can_stop` (a short last step).
std::optional<SftBatch> next_batch(SftRun& r, bool can_stop, double* data_time) {
  auto batch = r.loader->next();
  *data_time += r.loader->last_wait_seconds();
  if (!batch && !can_stop) {
    ++r.epoch;
    start_epoch(r, 0);
    batch = r.loader->next();
    *data_time += r.loader->last_wait_seconds();
    VDT_CHECK(batch.has_value(), "epoch ", r.epoch, " produced no batch");
  }
  if (batch) ++r.epoch_micro;
  return batch;
}

StepStats sft_step(SftRun& r, int64_t step) {
  StepStats st;
  RunContext& ctx = *r.ctx;
  // 1) learning rates for this step (warmup applies to both groups)
  const double f = warmup_factor(step, r.cfg.warmup_steps);
  r.sync->set_lr(0, r.cfg.lr * f);
  r.sync->set_lr(1, r.cfg.cond_lr * f);
  const auto f32 = torch::TensorOptions().device(ctx.device).dtype(torch::kFloat32);
  torch::Tensor loss_sum = torch::zeros({}, f32), mse_sum = torch::zeros({}, f32), last_loss, last_mse, sem_rms, x_rms;
  for (int64_t m = 0; m < r.cfg.grad_accum; ++m) {
    // 2) batch: the epoch's micro batches; its tail forms a short step
    auto batch = next_batch(r, /*can_stop=*/m > 0, &st.data_time);
    if (!batch) break;
    for (const auto& c : batch->clip_ids) st.clips += (st.clips.empty() ? "" : ";") + c;
    // 3) noise and timestep: streams keyed by the global micro-batch index (different on every rank, and the same
    //    draws for any world size: rank r's j-th micro batch is global position j * world + r)
    const uint64_t micro = static_cast<uint64_t>(r.micro_counter++) * ctx.world + ctx.rank;
    const int64_t id = std::min<int64_t>(
        999, static_cast<int64_t>(RngStream(r.cfg.random.seed, rng_purpose::kSftTimestep).uniform(micro, 0) * 1000));
    auto x0 = batch->latents.to(ctx.device, ctx.dtype, /*non_blocking=*/true);
    auto noise = ctx.noise(x0, r.cfg.random.seed, rng_purpose::kSftNoise, micro);
    const auto ex = make_sft_example(x0, noise, id, r.grid, r.grid_weights, ctx.dtype, r.cfg.first_frame_cond);
    // 4) forward, loss, backward (scaled by 1/grad_accum as the Python trainer's accelerate does, short steps included)
    DenoiserAux aux;
    auto pred =
        r.model->forward(model_inputs(*r.model, ex.x_t, ex.t, batch->context, batch->context_ids, batch->ids), &aux);
    auto mse = flow_mse(pred, ex.target, /*skip_first_frame=*/true);  // frame 0 is never scored (seed)
    auto loss = mse * ex.weight;
    (loss / static_cast<double>(r.cfg.grad_accum)).backward();
    r.sync->after_backward();
    last_loss = loss.detach().to(torch::kFloat32), last_mse = mse.detach().to(torch::kFloat32);
    loss_sum = loss_sum + last_loss;
    mse_sum = mse_sum + last_mse;
    sem_rms = aux.sem_rms, x_rms = aux.x_rms;
    st.timestep = ex.timestep;
    st.text_drop = batch->text_drop.mean().item<double>();  // host tensors: no device sync
    st.cond_drop = batch->cond_drop.mean().item<double>();
    st.mask_frac = batch->mask_frac.mean().item<double>();
    ++st.micro;
  }
  // 5) the loss over all ranks (with the stop flags); clip, and skip the update on a non-finite loss or norm (on the
  //    device), update
  const auto reduced = ctx.all_reduce_step({loss_sum / static_cast<double>(st.micro), last_loss});
  auto norm = r.sync->clip_grad_norm(r.cfg.grad_clip);
  r.sync->step((~torch::isfinite(norm) | ~torch::isfinite(reduced[0])).to(torch::kFloat32));
  // 6) metrics, in the step's one host sync (the losses are means over the ranks; the rest are this rank's)
  const auto h = ctx.to_host(reduced, {norm, last_mse, mse_sum / static_cast<double>(st.micro), sem_rms, x_rms});
  st.loss_mean = h.mean[0], st.loss = h.mean[1], st.stop = h.stop;
  st.grad_norm = h.local[0], st.mse = h.local[1], st.mse_mean = h.local[2], st.sem_rms = h.local[3];
  st.x_rms = h.local[4];
  return st;
}

std::string do_export(SftRun& r, int64_t step) {
  const std::string path =
      (std::filesystem::path(r.cfg.output) / ("step-" + std::to_string(step) + ".safetensors")).string();
  if (r.ctx->rank == 0) {  // every rank holds the same weights
    const SftExportFacts facts{r.train_ds->info().format, r.sem, r.init_ckpt, r.resumed_from,
                               r.resumed_from.empty() ? 0 : r.start_step};
    export_checkpoint(*r.model, path, sft_export_metadata(r.cfg, *r.model, facts, step));
    std::printf("[save] %s (%zu tensors, bf16, checked)\n", path.c_str(), r.model->parameters().size());
  }
  r.ctx->comm.barrier();
  return path;
}

std::string do_save_state(SftRun& r, int64_t step) {
  r.state_slot = save_trainer_state(r.cfg.output, r.state_slot, current_state(r, step), r.sync->state(), r.ctx->comm,
                                    r.cfg.to_json());
  if (r.ctx->rank != 0) return r.state_slot;
  std::printf("[state] %s (step %lld, epoch %lld after %lld micro batches; %s/state points here)\n",
              r.state_slot.c_str(), static_cast<long long>(step), static_cast<long long>(r.epoch),
              static_cast<long long>(r.epoch_micro), r.cfg.output.c_str());
  return r.state_slot;
}

void do_validation(SftRun& r, int64_t step) {
  if (!r.val_ds) return;
  ValConfig vc;
  vc.timesteps = r.cfg.val_timestep_list(), vc.variants = r.cfg.val_uncond,
  vc.first_frame_cond = r.cfg.first_frame_cond;
  vc.seed = r.cfg.random.seed, vc.max_clips = r.cfg.val_n, vc.rank = r.ctx->rank, vc.world = r.ctx->world;
  auto rows = run_validation(*r.model, *r.val_ds, vc);
  if (r.ctx->world > 1) {  // sums over the ranks' clips, then means again
    auto acc = torch::zeros({static_cast<int64_t>(rows.size()), 4}, torch::kFloat64);
    for (size_t i = 0; i < rows.size(); ++i) {
      const double n = static_cast<double>(rows[i].n);
      acc[i][0] = rows[i].mse * n, acc[i][1] = rows[i].mse_uncond * n, acc[i][2] = rows[i].mse_nulltext * n;
      acc[i][3] = n;
    }
    auto dev = acc.to(r.ctx->device);
    r.ctx->comm.all_reduce(dev)->wait();
    acc = dev.cpu();
    for (size_t i = 0; i < rows.size(); ++i) {
      const double n = std::max(acc[i][3].item<double>(), 1.0);
      rows[i].mse = acc[i][0].item<double>() / n, rows[i].mse_uncond = acc[i][1].item<double>() / n;
      rows[i].mse_nulltext = acc[i][2].item<double>() / n, rows[i].n = static_cast<int64_t>(acc[i][3].item<double>());
      rows[i].gap_uncond = rows[i].mse_uncond - rows[i].mse, rows[i].gap_nulltext = rows[i].mse_nulltext - rows[i].mse;
    }
  }
  if (r.ctx->rank == 0) log_sft_validation(r.log, step, rows, r.cfg.val_uncond);
  // The preview: val clip 0 sampled (Euler, --preview_steps, CFG as `vdt sample`) by rank 0 (every rank holds the
  // whole model), decoded with the root's VAE: rows ground truth, with conditions, without.
  if (r.ctx->rank == 0 && r.preview_vae) {
    EulerConfig ec;
    ec.steps = r.cfg.preview_steps, ec.first_frame_cond = r.cfg.first_frame_cond;
    const auto s = sample_clip(*r.model, *r.val_ds, 0, ec, r.cfg.random.seed);
    const auto& vae = *r.preview_vae;
    const auto grid =
        frame_grid({vae.decode(s.ground_truth), vae.decode(s.conditioned), vae.decode(s.unconditioned)}, 2, 4);
    r.log.image("preview/" + s.clip_id, write_step_preview(r.cfg.output, step, grid), step);
  }
}

void log_step(SftRun& r, int64_t step, const StepStats& st, double step_time) {
  r.log.add_time(step_time, st.data_time);
  if (r.ctx->rank != 0 || (step % r.cfg.log_every != 0 && step != r.cfg.max_steps)) return;
  log_sft_step(r.log, step, r.cfg.max_steps,
               {{"loss", st.loss},
                {"mse", st.mse},
                {"timestep", st.timestep},
                {"lr", r.sync->lr(0)},
                {"cond_lr", r.sync->lr(1)},
                {"grad_norm", st.grad_norm},
                {"sem_rms", st.sem_rms},
                {"x_rms", st.x_rms},
                {"text_drop", st.text_drop},
                {"cond_drop", st.cond_drop},
                {"mask_frac", st.mask_frac},
                {"step_time", step_time},
                {"data_time", st.data_time},
                {"mem_gb", r.ctx->peak_memory_gb()},
                {"epoch", static_cast<double>(r.epoch)},
                {"loss_mean", st.loss_mean},
                {"mse_mean", st.mse_mean}},
               st.clips);
}

void open_log(SftRun& r) {
  if (r.ctx->rank != 0) return;
  const int64_t steps_per_epoch = (r.n_micro + r.cfg.grad_accum - 1) / r.cfg.grad_accum;
  int64_t cond_params = 0, dit_params = 0;
  for (const auto& kv : r.model->named_parameters())
    (is_cond(kv.key()) ? cond_params : dit_params) += kv.value().numel();
  auto facts = run_facts(r.cfg, *r.train_ds, r.val_ds.get(), *r.model, r.sem, r.n_micro, steps_per_epoch, r.ctx->device,
                         cond_params, dit_params, r.ctx->world);
  facts["resume"] = {{"resumed_from", r.resumed_from}, {"start_step", r.start_step}, {"start_epoch", r.epoch},
                     {"skip_micro", r.skip_micro},     {"how", r.resume_how},        {"init_ckpt", r.init_ckpt}};
  // The weights this run starts from, by file and checksum (a random init says so).
  std::vector<std::string> files = r.base_files;
  if (is_warm_start(r.cfg.resume)) files.push_back(r.cfg.resume);
  auto weights = nlohmann::ordered_json::array();
  for (const auto& f : file_checksums(files))
    weights.push_back({{"file", f.path}, {"bytes", f.bytes}, {"crc32", f.crc_hex()}});
  facts["model"]["dit_files"] = r.base_files;  // the Python trainer's key
  facts["model"]["weight_files"] = weights;
  facts["model"]["random_init"] = r.cfg.random_init;
  facts["model"]["start_step"] = r.start_step;  // the Python trainer's key
  facts["model"]["resume_info"] = r.resume_info;
  // The Python trainer's lineage keys in args (its parse_args adds them) and its data position in dataset.
  facts["args"]["init_ckpt"] = r.init_ckpt;
  facts["args"]["resumed_from"] = r.resumed_from;
  facts["args"]["resumed_step"] = r.resumed_from.empty() ? 0 : r.start_step;
  facts["dataset"]["start_epoch"] = r.epoch;
  facts["dataset"]["skip_micro"] = r.skip_micro;
  facts["env"]["communicator"] = r.ctx->comm.describe();
  if (!r.precision_note.empty()) facts["env"]["precision_choice"] = r.precision_note;  // the plan chose bf16
  facts["env"]["update_path"] = r.sync->describe();
  if (r.plan) facts["memory_plan"] = plan_json(*r.plan);
  r.log.open(sft_log_spec(r.cfg, r.knobs, facts, r.start_step), r.start_step);
}

// The state is at or past --max_steps: a run killed after its last save and before done.json (or a re-queued job
// that already finished). done.json is written when missing, so the run reads as finished.
SftSummary nothing_to_train(SftRun& r, SftSummary& sum) {
  std::printf("[resume] the state is at step %lld >= --max_steps %lld: nothing to train\n",
              static_cast<long long>(r.start_step), static_cast<long long>(r.cfg.max_steps));
  const auto last = std::filesystem::path(r.cfg.output) / ("step-" + std::to_string(r.start_step) + ".safetensors");
  if (std::filesystem::exists(last)) sum.last_export = last.string();
  if (r.ctx->rank == 0 && !std::filesystem::exists(std::filesystem::path(r.cfg.output) / "done.json"))
    r.log.done({r.start_step, r.start_step, r.ctx->peak_memory_gb(), r.ctx->peak_memory_gb(), r.epoch, r.epoch_micro,
                sum.last_export});
  return sum;
}

// The SFT trainer as the loop sees it: its step, its log, its validation, its files (export, state).
class SftLoop final : public LoopTrainer {
 public:
  SftLoop(SftRun& r, SftSummary& sum) : r_(r), sum_(sum) {}
  StepResult train_step(int64_t step) override {
    st_ = sft_step(r_, step - 1);
    // The loop (summary, golden curves, the non-finite stop) sees the step's mean over micro batches and ranks; the
    // log's loss is the last micro batch, as the Python trainer logs it.
    return {st_.loss_mean, st_.grad_norm, st_.stop};
  }
  void log_step(int64_t step, const StepResult&, double step_time, double) override {
    vdt::log_step(r_, step, st_, step_time);
  }
  void validate(int64_t step) override { do_validation(r_, step); }
  // An export at the cadence and at the last step (--final_export); the state with an export and on a stop.
  void save(int64_t step, SaveWhy why) override {
    exported_ = why.cadence || (why.last && r_.cfg.final_export);
    if (exported_) sum_.last_export = do_export(r_, step);
    if (r_.cfg.save_state && (exported_ || why.stop)) sum_.state_dir = do_save_state(r_, step);
  }
  // Without a state, the weights are exported on a stop.
  void stopped(int64_t step) override {
    if (!r_.cfg.save_state && !exported_) sum_.last_export = do_export(r_, step);
    if (r_.ctx->rank == 0)
      std::printf(
          "[stop] %s: stopped after step %lld of %lld. %s\n", StopOnSignal::signal_name(), static_cast<long long>(step),
          static_cast<long long>(r_.cfg.max_steps),
          r_.cfg.save_state
              ? ("Continue with the same command plus --resume " + r_.cfg.output + " (or --resume auto)").c_str()
              : "No state was saved (--no-save_state); the weights are in the export above.");
  }
  [[noreturn]] void fail_non_finite(int64_t step, double loss) override {
    r_.ctx->fail_non_finite(step, loss,
                            "The last export" +
                                (sum_.last_export.empty() ? std::string(" (none yet)") : " " + sum_.last_export) +
                                (r_.state_slot.empty() ? "" : " and the state " + r_.state_slot) + " are intact.",
                            "lower --lr, check the data with `vdt data check`, or try --precision mixed");
  }

 private:
  SftRun& r_;
  SftSummary& sum_;
  StepStats st_;
  bool exported_ = false;  // at the step just saved
};

SftSummary finish(SftRun& r, SftSummary& sum) {
  sum.peak_mem_gb = r.ctx->peak_memory_gb();
  if (r.ctx->world > 1) {  // the ranks' weights must be identical: a checksum each prints (a host copy of every weight)
    sum.weights_crc = RunContext::checksum(r.model->parameters());
    std::printf("[done] rank %d of %d: weights CRC-32 %08x\n", r.ctx->rank, r.ctx->world,
                static_cast<unsigned>(sum.weights_crc));
  }
  std::tie(sum.s_per_step, sum.data_s_per_step) = r.log.mean_times();
  sum.mfu = r.ctx->mfu(sum.tflop_per_step, sum.s_per_step);
  double peak_max = sum.peak_mem_gb;  // the Python trainer's peak_mem_gb_max: the largest peak over the ranks
  if (r.ctx->world > 1) {
    auto t = torch::full({1}, sum.peak_mem_gb, torch::TensorOptions().device(r.ctx->device).dtype(torch::kFloat64));
    r.ctx->comm.all_reduce(t, ReduceOp::Max)->wait();
    peak_max = t.cpu().item<double>();
  }
  if (r.ctx->rank == 0)
    r.log.done({sum.steps, r.start_step, sum.peak_mem_gb, peak_max, r.epoch, r.epoch_micro, sum.last_export,
                sum.predicted_peak_gb});
  return sum;
}

}  // namespace

SftSummary train_sft(const SftConfig& cfg) {
  auto single = make_single_rank();
  return train_sft(cfg, *single, 0);
}

SftSummary train_sft(const SftConfig& cfg, Communicator& comm, int device_index) {
  StopOnSignal stop_on_signal;  // SIGTERM / SIGINT: finish the step, save the state, exit 0 (during start-up: exit 0
                                // before the first step)
  cfg.validate();
  const kernels::FusedKernelsScope fused(cfg.compute.fused());
  SftRun r;
  r.cfg = cfg;
  // A relative --output is taken from the current directory (the Python trainer joins it to its project root) and
  // recorded absolute, as the Python trainer's config.json records args.output.
  r.cfg.output = std::filesystem::absolute(cfg.output).lexically_normal().string();
  r.flags = cfg.memory_flags();
  r.knobs = r.flags.knobs;
  r.ctx = std::make_unique<RunContext>(comm, cfg.compute.device, device_index,
                                       r.knobs.precision == Precision::fp32 ? torch::kFloat32 : torch::kBFloat16);
  check_fp8_device(r.knobs.fp8, r.ctx->device, "--fp8");
  std::filesystem::create_directories(r.cfg.output);
  if (r.ctx->rank == 0) r.lock = hold_run_dir(r.cfg.output, "--output");
  build_data(r);
  plan_sft_memory(r);
  build_model(r);
  build_resume(r);
  open_log(r);
  SftSummary sum;
  sum.start_step = sum.steps = r.start_step, sum.state_dir = r.state_slot;
  for (const auto& p : r.model->parameters()) sum.params += p.numel();
  if (r.plan) sum.predicted_peak_gb = static_cast<double>(r.plan->peak_bytes) / double(int64_t{1} << 30);
  const auto& d = r.train_ds->info();  // a sample is the whole clip, bidirectional
  const WindowShape clip{
      .text_len = d.text_len, .frames = d.latent_frames, .latent_h = d.latent_h, .latent_w = d.latent_w};
  sum.tflop_per_step = r.model->train_flops(clip, false) * static_cast<double>(cfg.batch_size * cfg.grad_accum) / 1e12;
  if (r.start_step >= cfg.max_steps) return nothing_to_train(r, sum);
  start_epoch(r, r.skip_micro);
  SftLoop loop(r, sum);
  static_cast<LoopResult&>(sum) = run_training_loop(*r.ctx,
                                                    {.start_step = r.start_step,
                                                     .last_step = cfg.max_steps,
                                                     .val_every = cfg.val_every,
                                                     .validate_last = false,
                                                     .save_every = cfg.save_every},
                                                    loop);
  if (sum.stopped) return sum;
  return finish(r, sum);
}

}  // namespace vdt
