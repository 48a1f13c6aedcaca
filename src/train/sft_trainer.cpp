// The SFT loop. train_sft() reads top to bottom: build -> for each step { train_step; maybe validate; maybe export;
// log } -> final export and done.json. Setup lives in build_* functions; logging in run_log.
#include "train/sft_trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <zlib.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/stop_signal.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/sft_dataset.h"
#include "diffusion/flow_match.h"
#include "model/weights_io.h"
#include "train/activation_checkpoint.h"
#include "train/device.h"
#include "train/export.h"
#include "train/master_weights.h"
#include "train/optimizer.h"
#include "train/run_log.h"
#include "train/schedule.h"
#include "train/train_state.h"
#include "train/validation.h"
#include "train/zero2.h"

namespace vdt {
namespace {

constexpr uint32_t kTimestepPurpose = 0x74696d65;  // "time"
constexpr uint32_t kNoisePurpose = 0x6e6f6973;     // "nois"
const std::string kCondPrefix = "gc_sem_cond.";

bool is_cond(const std::string& name) { return name.rfind(kCondPrefix, 0) == 0; }

struct SftRun {
  SftConfig cfg;
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kFloat32;  // compute dtype
  int rank = 0, world = 1, device_index = 0;
  Communicator* comm = nullptr;
  std::shared_ptr<SftDataset> train_ds, val_ds;
  std::unique_ptr<Loader> loader;
  WanDiT model{nullptr};
  // One of two update paths: replicated (one rank: TrainParams + AdamW) or ZeRO-2 (world > 1: sharded).
  std::unique_ptr<TrainParams> params;
  std::unique_ptr<AdamW> replicated_opt;
  std::unique_ptr<Zero2> zero;
  AdamW* opt = nullptr;  // the optimizer of whichever path (learning rates are set through it)
  FlowGrid grid;
  torch::Tensor grid_weights;
  RunLog log;
  std::string init_ckpt;
  // data position
  int64_t epoch = 0, epoch_micro = 0, n_micro = 0, micro_counter = 0;
  std::vector<std::vector<int64_t>> epoch_batches;
  Geometry geometry;
  // resume: where this process started, and the slot it must not overwrite (resumed from or last written)
  int64_t start_step = 0, skip_micro = 0;
  std::string resumed_from, state_slot, resume_how;
};

struct StepStats {
  double loss = 0, mse = 0, timestep = 0, grad_norm = 0, sem_rms = 0, x_rms = 0;
  double text_drop = 0, cond_drop = 0, mask_frac = 0, data_time = 0;
  int64_t micro = 0;
  std::string clips;
};

void build_device(SftRun& r) {
  r.device = training_device(r.cfg.device, r.device_index);
  r.dtype = r.cfg.precision == "fp32" ? torch::kFloat32 : torch::kBFloat16;
}

void build_data(SftRun& r) {
  SftDataConfig dc;
  dc.root = r.cfg.data_root, dc.text_table = r.cfg.text_table, dc.vocab = r.cfg.vocab, dc.res = r.cfg.res;
  dc.text_dropout = r.cfg.text_dropout, dc.cond_dropout = r.cfg.cond_dropout, dc.mask_p = r.cfg.mask_p;
  dc.include_dropped = r.cfg.include_dropped, dc.limit = r.cfg.limit, dc.seed = r.cfg.seed;
  dc.split = "train";
  r.train_ds = std::make_shared<SftDataset>(dc);
  VDT_CHECK(r.train_ds->size() > 0, r.cfg.data_root, ": no train clips (after dropping drop rows and --limit)");
  if (r.cfg.val_every > 0 && r.cfg.val_n > 0) {
    SftDataConfig vc = dc;
    vc.split = "val", vc.limit = r.cfg.val_n, vc.include_dropped = false;
    r.val_ds = std::make_shared<SftDataset>(vc, r.train_ds->text_table());
    check_no_leak(*r.train_ds, *r.val_ds);
  }
  r.n_micro = static_cast<int64_t>(
      rank_micro_batches(r.cfg.seed, 0, r.train_ds->size(), r.rank, r.world, r.cfg.batch_size).size());
  VDT_CHECK(r.n_micro > 0, "--batch_size ", r.cfg.batch_size, " exceeds the ", r.train_ds->size(),
            " train clips per rank; lower it");
  r.loader = std::make_unique<Loader>(r.train_ds, r.cfg.batch_size, r.cfg.num_workers, 2, r.device.is_cuda());
  r.geometry = {r.world, r.cfg.grad_accum, r.cfg.batch_size, r.n_micro, r.train_ds->size(), r.cfg.seed};
}

bool is_warm_start(const std::string& resume) {
  return resume.size() > 12 && resume.substr(resume.size() - 12) == ".safetensors";
}

void build_model(SftRun& r) {
  ModelConfig mc = preset_config(r.cfg.model);
  const auto base_files = r.cfg.model_dir.empty() ? std::vector<std::string>{}
                                                  : weight_files(r.cfg.model_dir, "--model_dir");
  VDT_CHECK(r.train_ds->info().latent_channels == mc.in_dim, r.cfg.data_root, "/dataset.json: latent_channels ",
            r.train_ds->info().latent_channels, " does not match --model ", r.cfg.model, " (in_dim ", mc.in_dim, ")");
  VDT_CHECK(r.train_ds->info().text_dim == mc.text_dim, r.cfg.data_root, "/dataset.json: text_dim ",
            r.train_ds->info().text_dim, " does not match --model ", r.cfg.model, " (text_dim ", mc.text_dim, ")");
  const auto master_dtype = r.cfg.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  r.model = WanDiT(mc, torch::TensorOptions().device(r.device).dtype(master_dtype));
  SemCondConfig sc;
  sc.vocab = r.cfg.vocab, sc.vocab_size = sem_vocab_size(r.cfg.vocab), sc.scale = r.train_ds->info().sem_scale;
  sc.hidden = r.cfg.sem_hidden > 0 ? r.cfg.sem_hidden : std::min<int64_t>(512, mc.dim);
  r.model->install_sem_cond(sc);
  r.model->init_weights(r.cfg.seed);  // every parameter from the seed, the adapter included (same on every rank)
  if (!base_files.empty()) load_weights(*r.model, SafetensorsSet::open(base_files), {.optional_prefixes = {kCondPrefix}});
  if (is_warm_start(r.cfg.resume)) {  // warm start from an export (a plain Wan export leaves the adapter zero)
    auto files = SafetensorsSet::open({r.cfg.resume});
    const auto& meta = files.metadata();
    if (files.contains("gc_sem_cond.patch.weight"))
      VDT_CHECK(meta.count("vocab") && meta.at("vocab") == r.cfg.vocab, "--resume ", r.cfg.resume, ": its gc_sem_cond vocab is '",
                meta.count("vocab") ? meta.at("vocab") : "?", "', this run has --vocab ", r.cfg.vocab);
    if (meta.count("res") && meta.at("res") != r.cfg.res)
      std::printf("[resume] note: %s was trained at res %s, this run uses %s (cross-resolution warm start)\n",
                  r.cfg.resume.c_str(), meta.at("res").c_str(), r.cfg.res.c_str());
    const auto rep = load_weights(*r.model, files, {.optional_prefixes = {kCondPrefix}});
    std::printf("[resume] warm start from %s: %zu tensors, gc_sem_cond %s\n", r.cfg.resume.c_str(), rep.loaded.size(),
                rep.kept.empty() ? "loaded" : "kept zero-initialised");
    r.init_ckpt = r.cfg.resume;
  }
  // Compute weights: bf16 copies for mixed precision, the parameters themselves otherwise.
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& kv : r.model->named_parameters()) named.emplace_back(kv.key(), kv.value());
  const bool masters = r.cfg.precision == "mixed";
  if (r.world == 1) {
    r.params = std::make_unique<TrainParams>(named, masters);
  } else {  // ZeRO-2: this rank's slices of the masters, taken before the cast to the compute dtype
    AdamWConfig oc;
    if (r.cfg.precision != "bf16") oc.state_dtype = torch::kFloat32;
    const auto not_cond = [](const std::string& n) { return !is_cond(n); };
    r.zero = std::make_unique<Zero2>(
        named,
        std::vector<Zero2Group>{{"dit", not_cond, r.cfg.lr, r.cfg.weight_decay},
                                {"gc_sem_cond", is_cond, r.cfg.cond_lr, r.cfg.weight_decay}},
        *r.comm, masters ? torch::kFloat32 : r.dtype, oc);
  }
  // Module::to changes the parameters' data in place (same tensors), so the pairing above stays valid.
  if (masters) r.model->to(r.dtype);
  if (r.zero) {
    named.clear();
    for (auto& kv : r.model->named_parameters()) named.emplace_back(kv.key(), kv.value());
    r.zero->attach(named);
  }
  if (r.cfg.gradient_checkpointing) enable_block_checkpointing(*r.model);
  r.model->train();
  r.grid = training_grid();
  r.grid_weights = training_weights(r.grid);
}

void build_optimizer(SftRun& r) {
  if (r.zero) {
    r.opt = &r.zero->optimizer();
    return;
  }
  AdamWConfig oc;
  if (r.cfg.precision != "bf16") oc.state_dtype = torch::kFloat32;
  const auto not_cond = [](const std::string& n) { return !is_cond(n); };
  r.replicated_opt = std::make_unique<AdamW>(
      std::vector<AdamWGroup>{
          {"dit", r.params->select(not_cond), r.cfg.lr, r.cfg.weight_decay, r.params->select_names(not_cond)},
          {"gc_sem_cond", r.params->select(is_cond), r.cfg.cond_lr, r.cfg.weight_decay, r.params->select_names(is_cond)}},
      oc);
  r.opt = r.replicated_opt.get();
}

TrainerState current_state(const SftRun& r, int64_t step) {
  TrainerState st;
  st.step = step;
  st.pos = {r.epoch, r.epoch_micro, static_cast<uint64_t>(r.micro_counter)};
  st.geometry = r.geometry;
  st.vocab = r.cfg.vocab, st.res = r.cfg.res, st.init_ckpt = r.init_ckpt, st.model = r.cfg.model;
  st.precision = r.cfg.precision;
  return st;
}

// --resume DIR | auto: weights, optimizer moments and step counts, data position and micro-batch counter from the
// newest complete state slot. A vocab, res or model mismatch is an error naming both values.
void build_resume(SftRun& r) {
  if (r.cfg.resume.empty() || is_warm_start(r.cfg.resume)) return;
  const bool is_auto = r.cfg.resume == "auto";
  auto loaded = load_trainer_state(is_auto ? r.cfg.output : r.cfg.resume, is_auto);
  if (!loaded) {
    std::printf("[resume] auto: no complete state in %s; starting from step 0\n", r.cfg.output.c_str());
    return;
  }
  const auto& st = loaded->st;
  const std::string where = "--resume " + loaded->slot;
  for (auto [name, saved, now] : {std::tuple{"vocab", st.vocab, r.cfg.vocab}, {"res", st.res, r.cfg.res},
                                  {"model", st.model, r.cfg.model}})
    VDT_CHECK(saved.empty() || saved == now, where, ": the state was trained with --", name, " ", saved,
              ", this run has --", name, " ", now, "\n---> HINT: resume with the same --", name,
              ", or warm start from a step-N.safetensors export");
  if (!st.precision.empty() && st.precision != r.cfg.precision)
    std::printf("[resume] note: the state was trained with --precision %s, this run uses %s (weights and moments "
                "are converted)\n", st.precision.c_str(), r.cfg.precision.c_str());
  if (r.zero) {
    r.zero->load([&](const std::string& kind, const std::string& name) { return loaded->full(kind, name); },
                 loaded->optimizer_steps());
    r.zero->publish();
  } else {
    torch::NoGradGuard ng;
    for (auto& [name, t] : r.params->named()) {
      const auto src = loaded->full("weight", name);
      VDT_CHECK(src.numel() == t.numel(), where, ": weight '", name, "' has ", src.numel(),
                " elements, the model needs ", t.sizes());
      t.copy_(src.reshape(t.sizes()));
    }
    r.params->publish();
    const double steps = static_cast<double>(loaded->optimizer_steps());
    r.opt->load_state(
        [&](const std::string& k) {
          const auto dot = k.find('.');
          const std::string kind = k.substr(0, dot), name = k.substr(dot + 1);
          return kind == "step" ? torch::full({}, steps) : loaded->full(kind, name);
        },
        loaded->slot);
  }
  const ResumePoint rp = resume_position(st, r.geometry);
  r.start_step = st.step;
  r.epoch = rp.epoch, r.skip_micro = rp.skip;
  r.micro_counter = static_cast<int64_t>(rp.micro_counter);  // the streams' key: micro_counter * world + rank
  r.init_ckpt = st.init_ckpt;
  r.resumed_from = std::filesystem::canonical(loaded->slot).string();
  r.state_slot = loaded->slot;
  r.resume_how = rp.how;
  std::printf("[resume] %s: step %lld, epoch %lld after %lld micro batches (%s); init_ckpt %s\n",
              r.resumed_from.c_str(), static_cast<long long>(st.step), static_cast<long long>(rp.epoch),
              static_cast<long long>(rp.skip), rp.how.c_str(), r.init_ckpt.empty() ? "(base)" : r.init_ckpt.c_str());
  if (!(st.geometry == r.geometry))
    std::printf("[resume] saved geometry %s != this run's %s\n", st.geometry.to_json().dump().c_str(),
                r.geometry.to_json().dump().c_str());
}

// Starts the next epoch's micro batches (the permutation is a function of (seed, epoch)).
void start_epoch(SftRun& r, int64_t skip) {
  r.epoch_batches = rank_micro_batches(r.cfg.seed, r.epoch, r.train_ds->size(), r.rank, r.world, r.cfg.batch_size);
  r.loader->start_epoch(r.epoch, r.epoch_batches, skip);
  r.epoch_micro = skip;
}

StepStats train_step(SftRun& r, int64_t step) {
  StepStats st;
  // 1) learning rates for this step (warmup applies to both groups)
  const double f = warmup_factor(step, r.cfg.warmup_steps);
  r.opt->groups()[0].lr = r.cfg.lr * f;
  r.opt->groups()[1].lr = r.cfg.cond_lr * f;
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(r.device).dtype(torch::kFloat32));
  for (int64_t m = 0; m < r.cfg.grad_accum; ++m) {
    // 2) batch: the epoch's micro batches; its tail forms a short step
    auto batch = r.loader->next();
    st.data_time += r.loader->last_wait_seconds();
    if (!batch) {
      if (m > 0) break;
      ++r.epoch;
      start_epoch(r, 0);
      batch = r.loader->next();
      st.data_time += r.loader->last_wait_seconds();
      VDT_CHECK(batch.has_value(), "epoch ", r.epoch, " produced no batch");
    }
    ++r.epoch_micro;
    for (const auto& c : batch->clip_ids) st.clips += (st.clips.empty() ? "" : ";") + c;
    // 3) noise and timestep: streams keyed by the global micro-batch index (different on every rank, and the same
    //    draws for any world size: rank r's j-th micro batch is global position j * world + r)
    const uint64_t micro = static_cast<uint64_t>(r.micro_counter++) * r.world + r.rank;
    const int64_t id = std::min<int64_t>(999, static_cast<int64_t>(
                                                  RngStream(r.cfg.seed, kTimestepPurpose).uniform(micro, 0) * 1000));
    auto gen = make_generator(r.device, RngStream(r.cfg.seed, kNoisePurpose).u64(micro, 0));
    auto x0 = batch->latents.to(r.device, r.dtype, /*non_blocking=*/true);
    auto noise = torch::randn(x0.sizes(), gen, x0.options().dtype(torch::kFloat32)).to(r.dtype);
    const auto ex = make_sft_example(x0, noise, id, r.grid, r.grid_weights, r.dtype, r.cfg.first_frame_cond);
    // 4) forward, loss, backward (scaled by 1/grad_accum as the seed's accelerate does, short steps included)
    DiTAux aux;
    auto pred = r.model->forward({ex.x_t, ex.t, batch->context.to(r.device, r.dtype, true),
                                  batch->context_ids.to(r.device), {}, batch->ids.to(r.device, true)},
                                 &aux);
    auto mse = flow_mse(pred, ex.target, r.cfg.first_frame_cond);
    auto loss = mse * ex.weight;
    (loss / static_cast<double>(r.cfg.grad_accum)).backward();
    r.zero ? r.zero->finish_micro() : r.params->accumulate_grads();
    loss_sum = loss_sum + loss.detach();
    st.mse += mse.item<double>();
    st.timestep = ex.timestep;
    st.sem_rms = aux.sem_rms.item<double>();
    st.x_rms = aux.x_rms.item<double>();
    st.text_drop += batch->text_drop.mean().item<double>();
    st.cond_drop += batch->cond_drop.mean().item<double>();
    st.mask_frac += batch->mask_frac.mean().item<double>();
    ++st.micro;
  }
  // 5) the loss over all ranks; clip, skip the update on a non-finite loss or norm (on the device), update, publish
  loss_sum = loss_sum / static_cast<double>(st.micro * r.world);
  r.comm->all_reduce(loss_sum)->wait();
  auto norm = r.zero ? r.zero->clip_grad_norm(r.cfg.grad_clip) : clip_grad_norm(r.params->all(), r.cfg.grad_clip);
  auto found_inf = (~torch::isfinite(norm) | ~torch::isfinite(loss_sum)).to(torch::kFloat32);
  if (r.zero) {
    r.zero->step(found_inf);
  } else {
    r.opt->step(found_inf);
    r.params->publish();
    r.opt->zero_grad();
  }
  for (auto& p : r.model->parameters()) p.mutable_grad() = torch::Tensor();
  // 6) metrics (the loss is the mean over every rank's micro batches; the rest are this rank's)
  st.loss = loss_sum.item<double>();
  st.grad_norm = norm.item<double>();
  st.mse /= st.micro, st.text_drop /= st.micro, st.cond_drop /= st.micro, st.mask_frac /= st.micro;
  return st;
}

Metadata export_metadata(const SftRun& r, int64_t step) {
  Metadata m;
  m["format"] = "pt";
  m["trainer"] = "vdt train sft";
  m["stage"] = "sft_bidirectional";
  m["vocab"] = r.cfg.vocab;
  m["res"] = r.cfg.res;
  m["step"] = std::to_string(step);
  m["data_root"] = r.cfg.data_root;
  m["sem_scale"] = std::to_string(r.model->gc_sem_cond->config().scale);
  m["sem_hidden"] = std::to_string(r.model->gc_sem_cond->config().hidden);
  m["model_config"] = r.model->config().to_json();
  m["init_ckpt"] = r.init_ckpt;
  m["resumed_from"] = r.resumed_from;
  m["resumed_step"] = std::to_string(r.resumed_from.empty() ? 0 : r.start_step);
  m["hyperparameters"] = r.cfg.to_json();
  m["first_frame_cond"] = r.cfg.first_frame_cond ? "True" : "False";
  m["seed"] = std::to_string(r.cfg.seed);
  return m;
}

std::string do_export(SftRun& r, int64_t step) {
  const std::string path = (std::filesystem::path(r.cfg.output) / ("step-" + std::to_string(step) + ".safetensors")).string();
  if (r.rank == 0) {  // every rank holds the same weights
    export_checkpoint(*r.model, path, export_metadata(r, step));
    std::printf("[save] %s (%zu tensors, bf16, checked)\n", path.c_str(), r.model->parameters().size());
  }
  r.comm->barrier();
  return path;
}

std::string do_save_state(SftRun& r, int64_t step) {
  if (r.zero) {
    NamedTensors w, o;
    for (auto& [k, t] : r.zero->state_tensors()) (k.rfind("master.", 0) == 0 ? w : o).emplace_back(k, t);
    r.state_slot = save_trainer_state(r.cfg.output, r.state_slot, current_state(r, step), w, o, *r.comm,
                                      {{"zero2_layout", r.zero->layout().dump()}});
  } else {
    r.state_slot = save_trainer_state(r.cfg.output, r.state_slot, current_state(r, step), r.params->named(),
                                      r.opt->state(), *r.comm);
  }
  if (r.rank != 0) return r.state_slot;
  std::printf("[state] %s (step %lld, epoch %lld after %lld micro batches; %s/state points here)\n",
              r.state_slot.c_str(), static_cast<long long>(step), static_cast<long long>(r.epoch),
              static_cast<long long>(r.epoch_micro), r.cfg.output.c_str());
  return r.state_slot;
}

void do_validation(SftRun& r, int64_t step) {
  if (!r.val_ds) return;
  ValConfig vc;
  vc.timesteps = r.cfg.val_timestep_list(), vc.variants = r.cfg.val_uncond, vc.first_frame_cond = r.cfg.first_frame_cond;
  vc.seed = r.cfg.seed, vc.max_clips = r.cfg.val_n, vc.rank = r.rank, vc.world = r.world;
  auto rows = run_validation(*r.model, *r.val_ds, vc);
  if (r.world > 1) {  // sums over the ranks' clips, then means again
    auto acc = torch::zeros({static_cast<int64_t>(rows.size()), 4}, torch::kFloat64);
    for (size_t i = 0; i < rows.size(); ++i) {
      const double n = static_cast<double>(rows[i].n);
      acc[i][0] = rows[i].mse * n, acc[i][1] = rows[i].mse_uncond * n, acc[i][2] = rows[i].mse_nulltext * n;
      acc[i][3] = n;
    }
    auto dev = acc.to(r.device);
    r.comm->all_reduce(dev)->wait();
    acc = dev.cpu();
    for (size_t i = 0; i < rows.size(); ++i) {
      const double n = std::max(acc[i][3].item<double>(), 1.0);
      rows[i].mse = acc[i][0].item<double>() / n, rows[i].mse_uncond = acc[i][1].item<double>() / n;
      rows[i].mse_nulltext = acc[i][2].item<double>() / n, rows[i].n = static_cast<int64_t>(acc[i][3].item<double>());
      rows[i].gap_uncond = rows[i].mse_uncond - rows[i].mse, rows[i].gap_nulltext = rows[i].mse_nulltext - rows[i].mse;
    }
  }
  if (r.rank == 0) r.log.validation(step, rows);
}

bool any_rank(SftRun& r, bool v) {  // so every rank takes the same branch
  if (r.world == 1) return v;
  auto t = torch::full({1}, v ? 1.0f : 0.0f, torch::TensorOptions().device(r.device));
  r.comm->all_reduce(t, ReduceOp::Max)->wait();
  return t.item<float>() > 0;
}

}  // namespace

SftSummary train_sft(const SftConfig& cfg) {
  auto single = make_single_rank();
  return train_sft(cfg, *single, 0);
}

SftSummary train_sft(const SftConfig& cfg, Communicator& comm, int device_index) {
  cfg.validate();
  SftRun r;
  r.cfg = cfg;
  r.comm = &comm, r.rank = comm.rank(), r.world = comm.world(), r.device_index = device_index;
  std::filesystem::create_directories(cfg.output);
  build_device(r);
  build_data(r);
  build_model(r);
  build_optimizer(r);
  build_resume(r);
  const int64_t steps_per_epoch = (r.n_micro + cfg.grad_accum - 1) / cfg.grad_accum;
  int64_t cond_params = 0, dit_params = 0;
  for (const auto& kv : r.model->named_parameters()) (is_cond(kv.key()) ? cond_params : dit_params) += kv.value().numel();
  if (r.rank == 0) {
    auto facts = run_facts(cfg, *r.train_ds, r.val_ds.get(), *r.model, r.n_micro, steps_per_epoch, r.device,
                           cond_params, dit_params, r.world);
    facts["resume"] = {{"resumed_from", r.resumed_from}, {"start_step", r.start_step}, {"start_epoch", r.epoch},
                       {"skip_micro", r.skip_micro}, {"how", r.resume_how}, {"init_ckpt", r.init_ckpt}};
    facts["env"]["communicator"] = comm.describe();
    r.log.open(cfg, facts, r.start_step);
  }

  SftSummary sum;
  sum.start_step = r.start_step;
  if (r.start_step >= cfg.max_steps) {
    std::printf("[resume] the state is at step %lld >= --max_steps %lld: nothing to train\n",
                static_cast<long long>(r.start_step), static_cast<long long>(cfg.max_steps));
    sum.steps = r.start_step;
    const auto last = std::filesystem::path(cfg.output) / ("step-" + std::to_string(r.start_step) + ".safetensors");
    if (std::filesystem::exists(last)) sum.last_export = last.string();
    sum.state_dir = r.state_slot;
    return sum;
  }
  StopOnSignal stop_on_signal;  // SIGTERM / SIGINT: finish the step, save the state, exit 0
  start_epoch(r, r.skip_micro);
  int64_t step = r.start_step;
  std::string saved_state;  // slot written at `step`, if any
  while (step < cfg.max_steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepStats st = train_step(r, step);
    ++step;
    saved_state.clear();
    const double step_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!std::isfinite(st.loss))  // the loss is reduced over ranks: every rank stops here
      VDT_FAIL("step ", step, ": loss = ", st.loss, " (non-finite); the update was skipped and training stops. ",
               "The last export", sum.last_export.empty() ? " (none yet)" : " " + sum.last_export,
               r.state_slot.empty() ? "" : " and the state " + r.state_slot, " are intact.\n",
               "---> HINT: lower --lr, check the data with `vdt data check`, or try --precision mixed");
    if (step == r.start_step + 1) sum.first_loss = st.loss;
    sum.last_loss = st.loss;
    sum.losses.push_back(st.loss), sum.grad_norms.push_back(st.grad_norm);
    if (r.rank == 0 && (step % cfg.log_every == 0 || step == cfg.max_steps))
      r.log.step(step, cfg.max_steps,
                 {{"loss", st.loss}, {"mse", st.mse}, {"timestep", st.timestep}, {"lr", r.opt->groups()[0].lr},
                  {"cond_lr", r.opt->groups()[1].lr}, {"grad_norm", st.grad_norm}, {"sem_rms", st.sem_rms},
                  {"x_rms", st.x_rms}, {"text_drop", st.text_drop}, {"cond_drop", st.cond_drop},
                  {"mask_frac", st.mask_frac}, {"step_time", step_time}, {"data_time", st.data_time},
                  {"mem_gb", peak_memory_gb(r.device)}, {"epoch", static_cast<double>(r.epoch)}},
                 st.clips);
    else
      r.log.time_only(step_time, st.data_time);
    if (cfg.val_every > 0 && step % cfg.val_every == 0) do_validation(r, step);
    if (cfg.save_every > 0 && step % cfg.save_every == 0) {
      sum.last_export = do_export(r, step);
      if (cfg.save_state) saved_state = do_save_state(r, step);
    }
    if (any_rank(r, StopOnSignal::requested()) && step < cfg.max_steps) {
      if (cfg.save_state && saved_state.empty()) saved_state = do_save_state(r, step);
      if (!cfg.save_state) sum.last_export = do_export(r, step);
      if (r.rank == 0)
        std::printf("[stop] %s: stopped after step %lld of %lld. %s\n", StopOnSignal::signal_name(),
                    static_cast<long long>(step), static_cast<long long>(cfg.max_steps),
                    cfg.save_state ? ("Continue with the same command plus --resume " + cfg.output +
                                      " (or --resume auto)").c_str()
                                   : "No state was saved (--no-save_state); the weights are in the export above.");
      std::fflush(stdout);
      sum.stopped = true;
      sum.steps = step;
      sum.state_dir = r.state_slot;
      return sum;
    }
  }
  if (sum.last_export.empty() || sum.last_export.find("step-" + std::to_string(cfg.max_steps) + ".") == std::string::npos) {
    if (cfg.val_every > 0 && cfg.max_steps % cfg.val_every != 0) do_validation(r, cfg.max_steps);
    sum.last_export = do_export(r, cfg.max_steps);
  }
  if (cfg.save_state && saved_state.empty()) do_save_state(r, cfg.max_steps);
  sum.steps = cfg.max_steps;
  sum.state_dir = r.state_slot;
  sum.peak_mem_gb = peak_memory_gb(r.device);
  if (r.world > 1) {  // the ranks' weights must be identical: a checksum each prints (a host copy of every weight)
    for (const auto& p : r.model->parameters()) {
      const auto c = p.detach().to(torch::kCPU).contiguous();
      sum.weights_crc = static_cast<uint32_t>(::crc32(sum.weights_crc, static_cast<const Bytef*>(c.data_ptr()),
                                                      static_cast<uInt>(c.numel() * c.element_size())));
    }
    std::printf("[done] rank %d of %d: weights CRC-32 %08x\n", r.rank, r.world, static_cast<unsigned>(sum.weights_crc));
  }
  std::tie(sum.s_per_step, sum.data_s_per_step) = r.log.mean_times();
  if (r.rank == 0) r.log.done(sum.steps, sum.peak_mem_gb, sum.last_export);
  return sum;
}

}  // namespace vdt
