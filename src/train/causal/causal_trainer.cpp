// The causal trainer, in torchtitan's shape: build_* set-up, then the one training loop (train/loop/train_loop.h)
// over this trainer's step, log, validation and files. The LoRA's gradient all-reduce, clipping and the update go
// through the update path (distributed/grad_sync.h); the base through the base-model seam (model/denoiser.h); files
// in train/checkpoint/lora_checkpoint, logs through train/loop/run_log, where a run continues from in causal_resume.
#include "train/causal/causal_trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/file_checksum.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "core/stop_signal.h"
#include "data/causal_dataset.h"
#include "data/data_root.h"
#include "data/sampler.h"
#include "data/synth_vae.h"
#include "diffusion/forcing.h"
#include "distributed/block_shards.h"
#include "distributed/fp8_base.h"
#include "distributed/grad_sync.h"
#include "distributed/weight_stream.h"
#include "model/denoiser_registry.h"
#include "model/kernels/fused_ops.h"
#include "model/lora.h"
#include "model/weights_io.h"
#include "train/causal/causal_resume.h"
#include "train/checkpoint/lora_checkpoint.h"
#include "generate/preview.h"
#include "generate/stream_preview.h"
#include "generate/generation_model.h"
#include "generate/window.h"
#include "distributed/activation_checkpoint.h"
#include "distributed/fp8_blocks.h"
#include "generate/model_inputs.h"
#include "train/loop/run_context.h"
#include "train/loop/run_dir.h"
#include "train/loop/run_log.h"
#include "train/loop/schedule.h"
#include "train/loop/train_loop.h"
#include "train/plan/startup_plan.h"

namespace vdt {
namespace {
namespace fs = std::filesystem;

struct CausalRun {
  CausalConfig cfg;
  std::unique_ptr<RunContext> ctx;
  std::unique_ptr<RunDirLock> lock;  // rank 0: this process owns --out
  std::unique_ptr<CausalDataset> ds;
  std::shared_ptr<Denoiser> model;
  NamedTensors lora;  // float32 factors, by checkpoint name
  std::unique_ptr<GradSync> sync;
  std::unique_ptr<Communicator>
      node_comm;  // this rank's node, when the world spans several (before shards: outlives them)
  std::unique_ptr<BlockShards> shards;
  std::shared_ptr<WeightStream> stream;  // the frozen blocks streamed from host memory and / or stored as FP8
  int64_t base_bytes = 0;                // the frozen base's bytes in the compute dtype (from the planning skeleton)
  ForcingConfig forcing;
  FlowGrid grid;
  torch::Tensor grid_weights;
  int64_t base_params = 0;                                    // frozen, before sharding
  int64_t total_steps = 0, start_step = 0, samples_base = 0;  // samples_base: global sample index at start_step
  std::string state_slot, resume_how;
  std::string lora_start;  // args.json and the start-up table: fresh, the --init-lora file, or continued
  std::vector<int64_t> perm;
  int64_t perm_epoch = -1;
  RunLog log;                             // rank 0: train_log.jsonl, val_log.jsonl, tensorboard/
  std::shared_ptr<SynthVae> preview_vae;  // the root's vae.safetensors (synthetic roots), for --preview-steps
  MemoryFlags flags;                      // the memory knobs as the command line gave them (parsed once)
  MemoryKnobs knobs;                      // what the run applies: the flags', then the plan's (plan_causal_memory)
  std::optional<Plan> plan;               // the memory plan (none: no budget, --memory auto on the CPU)
};

// The ranks one copy of the frozen base is sharded over (1: not sharded).
int shard_ranks(const CausalRun& r) { return !r.shards ? 1 : r.node_comm ? r.node_comm->world() : r.ctx->world; }

// The base this run trains: its family from the data root (dataset.json's model_family), its preset from the shapes
// of --weights. --model is needed only where those leave it open (a random base; weights of no preset); a --model
// or weights that contradict the root or each other are an error naming both.
void resolve_base(CausalRun& r) {
  const std::string dataset_json = (fs::path(r.cfg.data_root) / "dataset.json").string();
  const std::string root_family = parse_dataset_json(dataset_json).model_family;
  std::string presets;
  for (const auto& p : family_presets(root_family)) presets += (presets.empty() ? "" : ", ") + p;
  std::string detected;  // the weights' preset ("custom": of no preset)
  if (!r.cfg.weights.empty()) {
    const auto [family, preset] = detect_base(SafetensorsSet::open(weight_files(r.cfg.weights, "--weights")));
    VDT_CHECK(family == root_family, "--weights ", r.cfg.weights, " is a ", family, " base (", preset, "), but ",
              dataset_json, " says model_family ", root_family, "\n---> HINT: give the weights of a ", root_family,
              " base, or a data root prepared for ", family, " (`vdt data prepare --model ", family, "`)");
    detected = preset;
  }
  if (r.cfg.model.empty()) {
    VDT_CHECK(!detected.empty() && detected != "custom", "--model is needed: ",
              r.cfg.weights.empty()
                  ? std::string("a random base (--random-init) has no shapes to read its preset from")
                  : "--weights " + r.cfg.weights + " match no preset of the " + root_family + " family",
              "\n---> HINT: pass --model with one of the ", root_family, " presets of ", dataset_json, ": ", presets);
    r.cfg.model = detected;
  } else {
    const std::string family = denoiser_family(r.cfg.model);
    VDT_CHECK(family == root_family, "--model ", r.cfg.model, " is a ", family, " base, but ", dataset_json,
              " says model_family ", root_family,
              "\n---> HINT: leave --model out (the root and --weights decide), "
              "or use one of ",
              presets);
    VDT_CHECK(detected.empty() || detected == "custom" || detected == r.cfg.model, "--model ", r.cfg.model,
              " disagrees with --weights ", r.cfg.weights, ", whose shapes are the ", detected,
              " preset\n---> HINT: "
              "leave --model out (the weights decide), or give ",
              detected);
  }
  r.cfg.check_picture1_base();
  check_lora_choice(r.cfg, denoiser_family(r.cfg.model));  // before any weights load
}

void build_data(CausalRun& r) {
  const std::string family = denoiser_family(r.cfg.model);
  if (r.cfg.chunk_frames == 0) r.cfg.chunk_frames = natural_chunk_frames(r.cfg.model);
  CausalDataConfig dc;
  dc.root = r.cfg.data_root, dc.text_table = r.cfg.text_table, dc.span_frames = r.cfg.span_frames();
  dc.val_clips = r.cfg.val_clips, dc.max_samples = r.cfg.max_samples, dc.seed = r.cfg.random.seed;
  dc.picture1 = r.cfg.picture1;
  r.ds = std::make_unique<CausalDataset>(dc);
  VDT_CHECK(r.ds->info().model_family == family, r.cfg.data_root, "/dataset.json: a ", r.ds->info().model_family,
            " root (model_family) for the ", family, " base --model ", r.cfg.model,
            "\n---> HINT: `vdt data synth --model ", family, "` writes a root for this base");
  const auto n = static_cast<double>(r.ds->train().size());
  r.total_steps = r.cfg.steps > 0 ? r.cfg.steps : static_cast<int64_t>(std::ceil(r.cfg.epochs * n / r.ctx->world));
}

// The memory plan (train/plan/startup_plan.h) fills the memory knobs the command line left out, before they apply;
// the run's args.json records them (what ran). `model`: the base with its LoRA (its shapes are what count).
void plan_causal_memory(CausalRun& r, Denoiser& model) {
  const auto& in = r.ds->info();
  const int64_t frames = r.cfg.span_frames(), copies = r.cfg.objective_mode() == CausalConfig::Objective::tf ? 2 : 1;
  RunShape shape;
  shape.training = "lora", shape.chunks = kSpanChunks;
  shape.video_rows = copies * frames * (in.latent_h / 2) * (in.latent_w / 2) +  // 1x2x2 patches
                     model.extra_rows(frames, in.latent_h, in.latent_w, r.cfg.chunk_frames);
  shape.text_len = in.text_len, shape.text_rows = r.ds->max_text_rows();
  shape.world = r.ctx->world;
  if (r.ctx->world > 1 && r.cfg.shard_mode() != CausalConfig::ShardBase::off)  // as build_model shards the blocks
    shape.shard_ranks = std::min(r.ctx->comm.local_world(), r.ctx->world);
  auto planned = plan_memory(model, r.ctx->device, shape, r.flags);
  r.knobs = planned.knobs, r.plan = std::move(planned.plan);
  if (r.plan) record_knobs(r.knobs, r.cfg.compute, r.cfg.memory, &r.cfg.causal_memory, &r.cfg.attention);
}

// The LoRA attached to `model` (which freezes the base), its factors in float32 (the Python trainer's).
NamedTensors attach_float32_lora(CausalRun& r, Denoiser& model) {
  LoraConfig lc;
  lc.rank = r.cfg.lora_rank, lc.alpha = r.cfg.lora_alpha, lc.targets = model.lora_targets();
  auto lora = attach_lora(model, lc, r.cfg.random.seed);
  torch::NoGradGuard ng;
  for (auto& [name, p] : lora) p.set_data(p.detach().to(torch::kFloat32));
  return lora;
}

// The plan on the model's shapes alone, so that a budget nothing meets is refused before any weight is read: a base
// built without storage (the meta device), or where a family's modules cannot move there (Wan), a skeleton in host
// memory in the compute dtype (the shapes and the dtype are what the plan counts). False when there is no budget to
// plan for (--memory auto on the CPU): nothing is built twice.
bool plan_before_weights(CausalRun& r) {
  if (r.flags.memory == "auto" && device_memory_info(r.ctx->device).total_bytes <= 0) return false;
  std::shared_ptr<Denoiser> skeleton;
  try {
    skeleton = make_denoiser(r.cfg.model, torch::TensorOptions().device(torch::kMeta).dtype(r.ctx->dtype));
  } catch (const std::exception&) {
    skeleton = make_denoiser(r.cfg.model, torch::TensorOptions().dtype(r.ctx->dtype));
  }
  fit_side_streams(*skeleton, *r.ds, r.cfg.span_frames(), r.cfg.chunk_frames);
  attach_float32_lora(r, *skeleton);
  for (const auto& p : skeleton->parameters())
    if (!p.requires_grad()) r.base_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  plan_causal_memory(r, *skeleton);
  return true;
}

// Where the frozen blocks live (distributed/weight_stream.h, block_shards.h): whole on the GPU, streamed from host
// memory, stored as FP8, or sharded over the ranks (a streamed block's shard on the host); the hooks the checkpoint
// runner calls around each run of a block.
void place_frozen_blocks(CausalRun& r, CheckpointOptions& co) {
  const auto blocks = r.model->block_modules();
  const auto streamed = streamed_block_indices(static_cast<int64_t>(blocks.size()), r.knobs.stream_blocks);
  if (r.ctx->world > 1 && r.cfg.shard_mode() != CausalConfig::ShardBase::off) {
    VDT_CHECK(!r.knobs.fp8_base, kBaseDtypeFlag,
              " fp8 with a base sharded over the ranks: not supported (the shards are gathered in the compute "
              "dtype)\n---> HINT: --shard-base off, or --base-dtype bf16");
    // Within each node, as the Python trainer's FSDP: the gathers stay on NVLink; the LoRA's gradients still sum over
    // the world.
    const int node = r.ctx->comm.local_world();
    if (node < r.ctx->world) r.node_comm = r.ctx->comm.split(node);
    r.shards = std::make_unique<BlockShards>(blocks, r.node_comm ? *r.node_comm : r.ctx->comm, true, streamed);
    auto* shards = r.shards.get();
    co.before = [shards](torch::nn::Module& b) { shards->gather(b); };
    co.after = [shards](torch::nn::Module& b) { shards->release(b); };
    return;
  }
  if (streamed.empty() && !r.knobs.fp8_base) return;
  WeightStreamOptions wo;
  wo.streamed = streamed, wo.prefetch = std::max<int64_t>(1, r.knobs.stream_prefetch), wo.fp8_base = r.knobs.fp8_base;
  r.stream = std::make_shared<WeightStream>(*r.model, r.ctx->device, wo);
  auto stream = r.stream;
  co.before = [stream](torch::nn::Module& b) { stream->gather(b); };
  co.after = [stream](torch::nn::Module& b) { stream->release(b); };
  if (r.ctx->rank == 0) std::printf("[stream] %s\n", stream->describe().c_str());
}

void build_model(CausalRun& r) {
  resolve_lora_shape(r.cfg);
  const bool planned = plan_before_weights(r);
  // A base that streams or is stored as FP8 and would not fit the device whole is built on the host; the weight
  // stream then takes its blocks' frozen weights and the rest moves to the device.
  const bool weights_placed = r.knobs.stream_blocks > 0 || r.knobs.fp8_base;
  const auto dev = device_memory_info(r.ctx->device);
  auto build_on = r.ctx->device;
  if (weights_placed && dev.total_bytes > 0 &&
      static_cast<double>(r.base_bytes) > 0.9 * static_cast<double>(dev.total_bytes))
    build_on = torch::kCPU;
  r.model = build_base(r.cfg.model, r.cfg.weights, r.cfg.random.seed, build_on, r.ctx->dtype);
  check_data_matches(*r.model, r.ds->info().latent_channels, r.ds->info().text_dim, r.cfg.data_root + "/dataset.json",
                     "--model " + r.cfg.model);
  fit_side_streams(*r.model, *r.ds, r.cfg.span_frames(), r.cfg.chunk_frames);  // e.g. an H3 root's silent audio
  r.lora = attach_float32_lora(r, *r.model);  // float32 beside the bf16 base (the Python trainer)
  for (const auto& p : r.model->parameters()) r.base_params += p.requires_grad() ? 0 : p.numel();
  torch::NoGradGuard ng;
  if (!planned) plan_causal_memory(r, *r.model);
  r.model->set_causal_kernel(r.knobs.attn);
  CheckpointOptions co = r.knobs.checkpoint_options();  // always checkpointed: block or selective
  place_frozen_blocks(r, co);
  if (build_on != r.ctx->device) r.model->to(r.ctx->device);  // what the stream left: the rest of the model
  enable_block_checkpointing(*r.model, co);
  if (const auto fp8 = r.knobs.fp8; fp8 != Fp8Mode::off) {  // wraps the checkpointing runner: after it
    // the frozen base held as FP8 unless it is sharded or streamed (gathered per call)
    const auto blocks = fp8_block_indices(r.model->block_modules().size());
    const auto what = enable_fp8_linears(*r.model, fp8, blocks, /*hold_frozen=*/!r.shards && !r.stream);
    if (r.ctx->rank == 0) std::printf("[fp8] %s\n", what.c_str());
  }
  r.model->train();
  // The loss weights come from the base's own training grid (Wan: shift 5; MiniMax-H3: 2.22), as DiffSynth trains it.
  const auto& schedule = flow_schedule(r.model->family());
  r.forcing = {kSpanChunks, r.cfg.chunk_frames, r.cfg.level_shift, r.cfg.clean_first_frame,
               schedule.round_model_timestep};
  r.grid = training_grid(1000, schedule.train_shift);
  r.grid_weights = training_weights(r.grid);
}

// AdamW (0.9, 0.999, wd 0.01) on the float32 factors, replicated on every rank (gradients all-reduced).
void build_update(CausalRun& r) {
  GradSyncOptions o;
  o.groups = {{"lora", [](const std::string&) { return true; }, r.cfg.lr, 0.01}};
  o.adamw.beta1 = 0.9, o.adamw.beta2 = 0.999, o.adamw.state_dtype = torch::kFloat32;
  r.sync = make_grad_sync(r.lora, o, r.ctx->comm);
  r.sync->attach(r.lora);
}

// Where the run continues from (causal_resume.h), once the model and the update path are built.
void build_resume(CausalRun& r) {
  const auto res = resume_causal({r.cfg, r.total_steps, *r.model, r.lora, *r.sync, r.ctx->rank, r.ctx->world});
  r.start_step = res.start_step, r.samples_base = res.samples_base, r.state_slot = res.state_slot;
  r.resume_how = res.how, r.lora_start = res.lora_start;
}

// The random streams of a window: per-chunk levels, the video noise, a side stream's noise and the conditioning
// latents' noise (train: keyed by the global sample index; validation: by the window index).
struct WindowStreams {
  uint32_t levels, noise, side, cond;
};
constexpr WindowStreams kTrainStreams{rng_purpose::kCausalLevels, rng_purpose::kCausalNoise,
                                      rng_purpose::kCausalSideNoise, rng_purpose::kCausalCondNoise};
constexpr WindowStreams kValStreams{rng_purpose::kCausalValLevels, rng_purpose::kCausalValNoise,
                                    rng_purpose::kCausalValSideNoise, rng_purpose::kCausalValCondNoise};

// The objective's loss on one window: the video span and each side stream of the base (H3's audio) noised with the
// chunks' levels, the family's conditioning (Picture 1, token tags) passed through; the loss sums the video term
// and each side stream's, each the chunk-weighted MSE (DiffSynth's H3 loss w·MSE(video) + w·MSE(audio), per chunk).
torch::Tensor window_loss(CausalRun& r, const CausalSample& s, const WindowStreams& streams, uint64_t key) {
  std::vector<double> u;
  const RngStream levels(r.cfg.random.seed, streams.levels);
  for (int64_t c = 0; c < kSpanChunks; ++c) u.push_back(levels.uniform(key, 0, c));
  const auto dev = r.ctx->device;
  const auto dtype = r.ctx->dtype;
  auto x0 = s.latents.unsqueeze(0).to(dev, dtype);  // [1, C, span, H, W]
  auto noise = r.ctx->noise(x0, r.cfg.random.seed, streams.noise, key);
  const bool tf = r.cfg.objective_mode() == CausalConfig::Objective::tf;
  const auto ex = tf ? make_tf_example(x0, noise, u, r.forcing, r.grid, r.grid_weights)
                     : make_df_example(x0, noise, u, r.forcing, r.grid, r.grid_weights);
  torch::Tensor context, context_ids, tags;
  r.ds->text_of(s.text_rows, &context, &context_ids, &tags);  // [R, Lt, text_dim], [1, span], [R, Lt]
  auto in = model_inputs(*r.model, ex.x_t, ex.t, context, tf ? torch::cat({context_ids, context_ids}, 1) : context_ids,
                         {}, AttentionPattern::forcing(r.cfg.chunk_frames, tf));  // tf: the clean copy's cells too
  std::map<std::string, torch::Tensor> cond_noise;  // clean conditioning latents get their own noise
  for (const auto& [name, latent] : s.cond)
    cond_noise[name] = r.ctx->noise(latent.unsqueeze(0).to(dev, dtype), r.cfg.random.seed, streams.cond, key);
  add_window_conditioning(in, tags, context_ids, s.cond, cond_noise);
  std::map<std::string, DfStream> side;
  for (const auto& name : r.model->side_streams()) {
    auto it = s.streams.find(name);
    if (it == s.streams.end()) continue;  // the root has none: the base runs without it
    const auto bounds = r.model->side_stream_chunks(name, r.cfg.span_frames(), r.cfg.chunk_frames);
    VDT_CHECK(it->second.size(-1) == bounds.back(), "causal window: the ", name, " stream has ", it->second.size(-1),
              " steps, the span needs ", bounds.back());
    const auto a0 = it->second.unsqueeze(0).to(dev, dtype);  // [1, ..., A]
    side[name] = make_df_stream(a0, r.ctx->noise(a0, r.cfg.random.seed, streams.side, key), ex, bounds);
    in.extra[name] = side[name].x_t, in.extra[name + ".t"] = side[name].t;
  }
  if (side.empty()) return df_loss(r.model->forward(in), ex, r.forcing);
  DenoiserAux aux;
  auto loss = df_loss(r.model->forward(in, &aux), ex, r.forcing);
  for (const auto& [name, st] : side) loss = loss + df_stream_loss(aux.streams.at(name), st, ex);
  return loss;
}

// Mean loss over every val window (rank r takes windows r, r + world, ...), fixed levels and noise per window.
double validate(CausalRun& r) {
  torch::NoGradGuard ng;
  const int64_t n = static_cast<int64_t>(r.ds->val().size());
  auto sum = torch::zeros({1}, torch::TensorOptions().device(r.ctx->device).dtype(torch::kFloat32));
  for (int64_t i = r.ctx->rank; i < n; i += r.ctx->world) {
    const auto s = r.ds->load(r.ds->val()[static_cast<size_t>(i)], r.ds->val_start(i));
    sum += window_loss(r, s, kValStreams, static_cast<uint64_t>(i)).to(torch::kFloat32);
  }
  r.ctx->comm.all_reduce(sum)->wait();
  return n > 0 ? sum.item<double>() / static_cast<double>(n) : 0.0;
}

// The preview at a validation step: val window 0 sampled chunk by chunk (Euler, --preview-steps, CFG against the null
// prompt as `vdt sample --causal`), on every rank (a sharded base gathers its blocks with every rank), decoded with
// the root's VAE by rank 0: rows ground truth, sample. Noise from (seed, clip, start): every rank draws the same.
void draw_preview(CausalRun& r, int64_t step) {
  if (!r.preview_vae) return;
  EulerConfig ec;
  ec.steps = r.cfg.preview_steps;
  ec.shift = flow_schedule(r.model->family()).sample_shift;
  const auto s =
      sample_causal_window(*r.model, *r.ds, 0, r.cfg.chunk_frames, ec, r.cfg.random.seed, r.cfg.clean_first_frame);
  if (r.ctx->rank != 0) return;
  const auto grid = frame_grid({r.preview_vae->decode(s.ground_truth), r.preview_vae->decode(s.sample)}, 2, 4);
  r.log.image("preview/" + s.clip_id + "@" + std::to_string(s.start), write_step_preview(r.cfg.out, step, grid), step);
}

// --val-sample-every: val window 0 streamed with the KV cache on every rank (as draw_preview), logged by rank 0.
void draw_stream_preview(CausalRun& r, int64_t step) {
  const auto p = stream_preview(*r.model, *r.ds, r.cfg.data_root, r.cfg.chunk_frames, r.cfg.preview_steps,
                                r.cfg.random.seed, r.cfg.clean_first_frame);
  if (r.ctx->rank != 0) return;
  r.log.scalar("val/stream_chunk_s", p.seconds_per_chunk, step);
  if (p.grid.defined()) r.log.image(p.tag, encode_png(p.grid), step);
}

void log_validation(CausalRun& r, int64_t step) {
  const double v = validate(r);
  draw_preview(r, step);
  if (r.ctx->rank != 0) return;
  const nlohmann::json row = {{"step", step}, {"val_loss", v}, {"windows", r.ds->val().size()}};
  r.log.validation(
      step, {row}, {{"val/loss", v}},
      string_format("val step %lld: loss %.4f over %zu windows", static_cast<long long>(step), v, r.ds->val().size()));
}

struct StepStats {
  double loss = 0, grad_norm = 0, lr = 0, data_time = 0;
  bool stop = false;  // a signal reached some rank
  std::string clip;
};

StepStats causal_step(CausalRun& r, int64_t it) {
  StepStats st;
  RunContext& ctx = *r.ctx;
  // 1) this rank's window: global sample g of a stream that depends on (seed, epoch, sample) only
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(r.ds->train().size());
  const int64_t g = r.samples_base + (it - r.start_step) * ctx.world + ctx.rank;
  const int64_t epoch = g / n;
  if (epoch != r.perm_epoch) r.perm = epoch_permutation(r.cfg.random.seed, epoch, n), r.perm_epoch = epoch;
  const int64_t index = r.perm[static_cast<size_t>(g % n)];
  const auto s = r.ds->load(r.ds->train()[static_cast<size_t>(index)], r.ds->train_start(index, epoch));
  st.clip = s.clip_id + "@" + std::to_string(s.start);
  st.data_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // 2) forward and loss with levels and noise keyed by g; backward (LoRA gradients all-reduced as they complete)
  auto loss = window_loss(r, s, kTrainStreams, static_cast<uint64_t>(g));
  loss.backward();
  r.sync->after_backward();
  // 3) the loss and the stop flag over the ranks; clip, schedule, update; a non-finite loss or norm skips the update
  const auto reduced = ctx.all_reduce_step({loss});
  auto norm = r.sync->clip_grad_norm(1.0);
  const double ratio = r.cfg.lr_min / r.cfg.lr;
  r.sync->set_lr(0, r.cfg.lr * warmup_cosine_factor(it, r.cfg.warmup, r.total_steps, ratio));
  r.sync->step((~torch::isfinite(norm) | ~torch::isfinite(reduced[0])).to(torch::kFloat32));
  // 4) metrics, in the step's one host sync
  const auto h = ctx.to_host(reduced, {norm});
  st.loss = h.mean[0], st.stop = h.stop, st.grad_norm = h.local[0];
  st.lr = r.cfg.lr * warmup_cosine_factor(it + 1, r.cfg.warmup, r.total_steps, ratio);  // as the Python trainer logs it
  return st;
}

// The state slot first, then the LoRA file: the slot is the save's unit. A kill or a full disk before the slot is
// sealed leaves the previous slot and LoRA file as the newest pair; a kill after it leaves a slot whose LoRA file the
// re-run writes from it (build_resume). Never a LoRA file without its moments.
std::string save(CausalRun& r, int64_t step) {
  const std::string path = lora_step_path(r.cfg.out, step);
  const int64_t seen = r.samples_base + (step - r.start_step) * r.ctx->world;
  r.state_slot = save_causal_state(r.cfg.out, r.cfg.to_json(), r.state_slot,
                                   {step, seen, r.ctx->world, r.model->config_json()}, r.sync->state(), r.ctx->comm);
  if (r.ctx->rank == 0) save_lora_file(path, r.cfg.lora_file_meta(*r.model, step), r.lora);
  if (r.ctx->rank == 0) std::printf("[save] %s; state %s\n", path.c_str(), r.state_slot.c_str());
  return path;
}

// val_samples.json (the val windows: clip id, start) and args.json (the flags), as the Python trainer writes them.
std::vector<std::pair<std::string, std::string>> run_files(const CausalRun& r) {
  nlohmann::json val = nlohmann::json::array();
  for (size_t i = 0; i < r.ds->val().size(); ++i)
    val.push_back(
        {r.ds->clips()[static_cast<size_t>(r.ds->val()[i].clip)].clip_id, r.ds->val_start(static_cast<int64_t>(i))});
  auto args = nlohmann::ordered_json::parse(r.cfg.to_json());
  args["lora_start"] = r.lora_start;  // beside the flags: where this run's LoRA came from (fresh, loudly)
  if (r.plan) args["memory_plan"] = plan_json(*r.plan);
  return {{"val_samples.json", val.dump()}, {"args.json", args.dump(1)}};
}

// The start-up table: one screen with what this run will do.
// One training window as the base packs it (an H3 base: the prefix, then the chunks): the start-up table's sequence
// line and the step's model FLOPs.
WindowShape window_shape(const CausalRun& r) {
  WindowShape window;
  const auto& in = r.ds->info();
  window.text_len = in.text_len, window.frames = r.cfg.span_frames(), window.chunk_frames = r.cfg.chunk_frames;
  window.latent_h = in.latent_h, window.latent_w = in.latent_w;
  window.copies = r.cfg.objective_mode() == CausalConfig::Objective::tf ? 2 : 1;
  window.cond_rows = r.ds->picture1_rows(), window.cond_variant = r.cfg.picture1;
  return window;
}

std::string startup_table(const CausalRun& r) {
  int64_t trainable = 0;
  for (const auto& [n, p] : r.lora) trainable += p.numel();
  const std::string shards = !r.shards ? ""
                                       : ", blocks sharded over the " + std::to_string(shard_ranks(r)) + " ranks of " +
                                             (r.node_comm ? "each node" : "the world") + ": " +
                                             std::to_string(r.shards->shard_bytes() >> 20) + " MiB of " +
                                             std::to_string(r.shards->full_bytes() >> 20) + " MiB per rank";
  std::string t = string_format(
      "vdt train causal\n"
      "  objective %s  span %lld chunks x %lld frames  level_shift %s  attn %s  act_offload %s  clean first %s\n"
      "  model %s%s%s  device %s  precision %s  world %d (%s; %s)\n"
      "  data %s: train %zu windows, val %zu (val_samples.json), flagged clips dropped %lld, too short %lld\n"
      "  LoRA rank %lld alpha %s: %.2fM trainable; frozen base %.1fM%s\n"
      "  steps %lld (%s), lr %s -> %s, warmup %lld, save every %lld; %s\n",
      r.cfg.objective.c_str(), static_cast<long long>(kSpanChunks), static_cast<long long>(r.cfg.chunk_frames),
      py_float(r.cfg.level_shift).c_str(), causal_kernel_name(r.knobs.attn), r.knobs.act_offload ? "on" : "off",
      r.cfg.clean_first_frame ? "yes" : "no", r.cfg.model.c_str(),
      r.cfg.weights.empty() ? " (random base, non-zero head)" : " ", r.cfg.weights.c_str(), r.ctx->device.str().c_str(),
      precision_name(r.knobs.precision), r.ctx->world, r.ctx->comm.describe().c_str(), r.sync->describe().c_str(),
      r.cfg.data_root.c_str(), r.ds->train().size(), r.ds->val().size(), static_cast<long long>(r.ds->n_flagged()),
      static_cast<long long>(r.ds->n_short()), static_cast<long long>(r.cfg.lora_rank),
      py_float(r.cfg.lora_alpha).c_str(), trainable / 1e6, r.base_params / 1e6, shards.c_str(),
      static_cast<long long>(r.total_steps), r.cfg.steps > 0 ? "--steps" : "epochs x windows / world",
      py_float(r.cfg.lr).c_str(), py_float(r.cfg.lr_min).c_str(), static_cast<long long>(r.cfg.warmup),
      static_cast<long long>(r.cfg.save_every), r.resume_how.c_str());
  if (const auto line = r.model->describe_sequence(window_shape(r)); !line.empty()) t += "  " + line + "\n";
  if (r.lora_start == kFreshLoraChosen)
    t += "  LoRA FRESH (--init-lora none): a new LoRA (B = 0), not the released CWM LoRA the Python trainer "
         "continues by default\n";
  else if (r.lora_start == kFreshLora)
    t += "  LoRA FRESH: a new LoRA (B = 0), not the released CWM LoRA the Python trainer continues by default; "
         "pass that file with --init-lora FILE to train on from it\n";
  else
    t += "  LoRA from " + r.lora_start + "\n";
  if (r.cfg.random_init)
    t += string_format("  weights RANDOM INIT (--random-init): a random frozen base from seed %llu\n",
                       static_cast<unsigned long long>(r.cfg.random.seed));
  else
    for (const auto& f : file_checksums(weight_files(r.cfg.weights, "--weights")))
      t += string_format("  weights %s (%llu bytes, crc32 %s)\n", f.path.c_str(),
                         static_cast<unsigned long long>(f.bytes), f.crc_hex().c_str());
  t += "  flags " + changed_fields(r.cfg, CausalConfig::fields()) + "\n";
  if (r.plan)  // each choice with its reason, the predicted peak and s/step
    for (const auto& line : r.plan->table_lines()) t += "  " + line + "\n";
  return t;
}

void open_logs(CausalRun& r) {
  // Every rank knows whether previews are drawn (each takes part in the sampling).
  if (r.cfg.val_every > 0 && r.cfg.preview_steps > 0 && !r.ds->val().empty() &&
      fs::exists(fs::path(r.cfg.data_root) / "vae.safetensors"))
    r.preview_vae = std::make_shared<SynthVae>(SynthVae::open(r.cfg.data_root));
  if (r.ctx->rank != 0) return;
  // The Python trainer's JSON-lines logs; TensorBoard as the SFT trainer writes it (every flag, typed, in the HParams
  // dashboard with the loss metrics).
  RunLogSpec spec;
  spec.dir = r.cfg.out, spec.format = LogFormat::jsonl;
  spec.train_columns = {"step", "loss_v", "gnorm", "lr", "sec"}, spec.val_columns = {"step", "val_loss", "windows"};
  spec.table = startup_table(r), spec.files = run_files(r);
  spec.hparams = fields_to_json(r.cfg, CausalConfig::fields(), JsonValues::typed);
  spec.hparam_metrics = {"train/loss_v", "val/loss"};
  r.log.open(spec, r.start_step);
}

// The Python trainer's console line and train_log.jsonl row, and TensorBoard's train/ scalars; `elapsed`: seconds
// since this process's first step, `step_time`: this step's.
void log_step(CausalRun& r, int64_t step, const StepStats& st, double elapsed, double step_time) {
  if (r.ctx->rank != 0) return;
  const double per_step = elapsed / static_cast<double>(step - r.start_step), mem = r.ctx->peak_memory_gb();
  r.log.step(step, {{"step", step}, {"loss_v", st.loss}, {"gnorm", st.grad_norm}, {"lr", st.lr}, {"sec", elapsed}},
             {{"train/loss_v", st.loss},
              {"train/grad_norm", st.grad_norm},
              {"train/lr", st.lr},
              {"train/step_time", step_time},
              {"train/data_time", st.data_time},
              {"train/mem_gb", mem}},
             string_format("step %lld/%lld loss_v=%.4f gnorm=%s lr=%.2e mem=%.1fG %.2fs/step eta=%.2fh data=%.3fs %s",
                           static_cast<long long>(step), static_cast<long long>(r.total_steps), st.loss,
                           fmt_gnorm(st.grad_norm).c_str(), st.lr, mem, per_step,
                           (r.total_steps - step) * per_step / 3600, st.data_time, st.clip.c_str()));
}

// The causal trainer as the loop sees it: its step, its log, its validation, its files (the LoRA and its state).
class CausalLoop final : public LoopTrainer {
 public:
  CausalLoop(CausalRun& r, CausalSummary& sum) : r_(r), sum_(sum) {}
  StepResult train_step(int64_t step) override {
    st_ = causal_step(r_, step - 1);
    return {st_.loss, st_.grad_norm, st_.stop};
  }
  // The step's log line, and every --val-sample-every steps a streamed preview of the first validation clip.
  void log_step(int64_t step, const StepResult&, double step_time, double elapsed) override {
    vdt::log_step(r_, step, st_, elapsed, step_time);
    if (r_.cfg.val_sample_every > 0 && step % r_.cfg.val_sample_every == 0 && !r_.ds->val().empty())
      draw_stream_preview(r_, step);
  }
  void validate(int64_t step) override { log_validation(r_, step); }
  void save(int64_t step, SaveWhy) override { sum_.last_lora = vdt::save(r_, step); }  // every reason: LoRA + state
  void stopped(int64_t step) override {
    if (r_.ctx->rank == 0)
      std::printf(
          "[stop] %s: stopped after step %lld of %lld; the LoRA and state are saved. Re-run the same command "
          "to continue.\n",
          StopOnSignal::signal_name(), static_cast<long long>(step), static_cast<long long>(r_.total_steps));
  }
  [[noreturn]] void fail_non_finite(int64_t step, double loss) override {
    r_.ctx->fail_non_finite(
        step, loss,
        "The last LoRA " + (sum_.last_lora.empty() ? "(none yet)" : sum_.last_lora) + " and its state are intact.",
        "lower --lr, or check the data with `vdt data check`");
  }

 private:
  CausalRun& r_;
  CausalSummary& sum_;
  StepStats st_;
};

CausalSummary finish(CausalRun& r, CausalSummary& sum, double seconds) {
  std::fflush(stdout);
  sum.s_per_step = sum.steps > r.start_step ? seconds / static_cast<double>(sum.steps - r.start_step) : 0;
  sum.peak_mem_gb = r.ctx->peak_memory_gb();
  sum.pinned_host_gb = pinned_host_gb(r.ctx->device);
  sum.mfu = r.ctx->mfu(sum.tflop_per_step, sum.s_per_step);
  std::vector<torch::Tensor> factors;
  for (const auto& [n, p] : r.lora) factors.push_back(p), sum.lora.emplace_back(n, p.detach().to(torch::kCPU).clone());
  sum.lora_crc = RunContext::checksum(factors);
  if (r.ctx->world > 1)
    std::printf("[done] rank %d of %d: LoRA CRC-32 %08x\n", r.ctx->rank, r.ctx->world, sum.lora_crc);
  return sum;
}

}  // namespace

CausalSummary train_causal(const CausalConfig& cfg) {
  auto single = make_single_rank();
  return train_causal(cfg, *single, 0);
}

CausalSummary train_causal(const CausalConfig& cfg, Communicator& comm, int device_index) {
  StopOnSignal stop_on_signal;  // SIGTERM / SIGINT: finish the step, save, exit 0 (a re-run continues); during
                                // start-up: exit 0 before the first step
  cfg.validate();
  const kernels::FusedKernelsScope fused(cfg.compute.fused());
  CausalRun r;
  r.cfg = cfg;
  r.flags = cfg.memory_flags();
  r.knobs = r.flags.knobs;
  r.ctx = std::make_unique<RunContext>(comm, cfg.compute.device, device_index,
                                       r.knobs.precision == Precision::fp32 ? torch::kFloat32 : torch::kBFloat16);
  check_fp8_device(r.knobs.fp8, r.ctx->device, "--fp8");
  if (r.ctx->rank == 0) r.lock = hold_run_dir(cfg.out, "--out");
  resolve_base(r);
  build_data(r);
  build_model(r);
  build_update(r);
  build_resume(r);
  open_logs(r);
  CausalSummary sum;
  sum.start_step = sum.steps = r.start_step, sum.total_steps = r.total_steps, sum.resume_how = r.resume_how;
  sum.lora_start = r.lora_start;
  sum.params = r.base_params;  // counted before sharding
  sum.shard_ranks = shard_ranks(r);
  sum.shard_bytes = r.shards ? r.shards->shard_bytes() : 0;
  if (r.plan) sum.predicted_peak_gb = static_cast<double>(r.plan->peak_bytes) / double(int64_t{1} << 30);
  for (const auto& [n, p] : r.lora) sum.params += p.numel();
  sum.tflop_per_step = r.model->train_flops(window_shape(r), /*frozen_base=*/true) / 1e12;
  CausalLoop loop(r, sum);
  static_cast<LoopResult&>(sum) = run_training_loop(*r.ctx,
                                                    {.start_step = r.start_step,
                                                     .last_step = r.total_steps,
                                                     .val_every = cfg.val_every,
                                                     .validate_first = true,
                                                     .save_every = cfg.save_every},
                                                    loop);
  return finish(r, sum, sum.seconds);
}

}  // namespace vdt
