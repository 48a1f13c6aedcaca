// The causal loop. train_causal() reads top to bottom: build -> for each step { train_step; log; maybe save } ->
// done. Setup lives in build_* functions; files in train/lora_checkpoint.
#include "train/causal_trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <zlib.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/rng_purposes.h"
#include "core/stop_signal.h"
#include "data/causal_dataset.h"
#include "data/sampler.h"
#include "diffusion/forcing.h"
#include "dist/block_shards.h"
#include "model/lora.h"
#include "model/weights_io.h"
#include "train/activation_checkpoint.h"
#include "train/device.h"
#include "train/optimizer.h"
#include "train/replicated_grads.h"
#include "train/run_log.h"
#include "train/schedule.h"
#include "train/trace.h"

namespace vdt {
namespace {
namespace fs = std::filesystem;

constexpr uint32_t kLevelPurpose = 0x63617573;  // "caus": per-chunk noise levels
constexpr uint32_t kNoisePurpose = 0x636e6f69;  // "cnoi": the window's noise
constexpr uint32_t kValPurpose = 0x6376616c;    // "cval": validation levels and noise (fixed per window)

struct CausalRun {
  CausalConfig cfg;
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kBFloat16;
  Communicator* comm = nullptr;
  int rank = 0, world = 1;
  std::unique_ptr<CausalDataset> ds;
  WanDiT model{nullptr};
  NamedTensors lora;  // float32 factors, by checkpoint name
  std::vector<torch::Tensor> lora_params;
  std::unique_ptr<AdamW> opt;
  std::unique_ptr<ReplicatedGrads> sync;
  std::unique_ptr<BlockShards> shards;
  ForcingConfig forcing;
  FlowGrid grid;
  torch::Tensor grid_weights;
  int64_t base_params = 0;  // frozen, before sharding
  int64_t total_steps = 0, start_step = 0, samples_base = 0;  // samples_base: global sample index at start_step
  std::string state_slot, resume_how;
  std::vector<int64_t> perm;
  int64_t perm_epoch = -1;
};

void build_device(CausalRun& r, int device_index) {
  r.device = training_device(r.cfg.device, device_index);
  r.dtype = r.cfg.precision == "fp32" ? torch::kFloat32 : torch::kBFloat16;
}

void build_data(CausalRun& r) {
  CausalDataConfig dc;
  dc.root = r.cfg.data_root, dc.text_table = r.cfg.text_table, dc.span_frames = r.cfg.span_frames();
  dc.val_clips = r.cfg.val_clips, dc.max_samples = r.cfg.max_samples, dc.seed = r.cfg.seed;
  r.ds = std::make_unique<CausalDataset>(dc);
  const auto n = static_cast<double>(r.ds->train().size());
  r.total_steps = r.cfg.steps > 0 ? r.cfg.steps : static_cast<int64_t>(std::ceil(r.cfg.epochs * n / r.world));
}

void build_model(CausalRun& r) {
  const ModelConfig mc = preset_config(r.cfg.model);
  const auto& info = r.ds->info();
  VDT_CHECK(info.latent_channels == mc.in_dim, r.cfg.data_root, "/dataset.json: latent_channels ", info.latent_channels,
            " does not match --model ", r.cfg.model, " (in_dim ", mc.in_dim, ")");
  VDT_CHECK(info.text_dim == mc.text_dim, r.cfg.data_root, "/dataset.json: text_dim ", info.text_dim,
            " does not match --model ", r.cfg.model, " (text_dim ", mc.text_dim, ")");
  r.model = build_causal_base(r.cfg.model, r.cfg.weights, r.cfg.seed, r.device, r.dtype);
  LoraConfig lc;
  lc.rank = r.cfg.lora_rank, lc.alpha = r.cfg.lora_alpha;
  r.lora = attach_lora(*r.model, lc, r.cfg.seed);  // freezes the base
  for (const auto& p : r.model->parameters()) r.base_params += p.requires_grad() ? 0 : p.numel();
  torch::NoGradGuard ng;
  for (auto& [name, p] : r.lora) {  // trained in float32 beside the bf16 base (the seed: net.to(float32))
    p.set_data(p.detach().to(torch::kFloat32));
    r.lora_params.push_back(p);
  }
  r.model->set_causal_kernel(causal_kernel_from_string(r.cfg.attn));
  CheckpointOptions co;
  co.offload_inputs = r.cfg.act_offload == "on";
  const bool shard = r.world > 1 && r.cfg.shard_base != "off";
  if (shard) {
    std::vector<torch::nn::Module*> blocks;
    for (auto& b : *r.model->blocks) blocks.push_back(b.get());
    r.shards = std::make_unique<BlockShards>(blocks, *r.comm);
    auto* shards = r.shards.get();
    co.before = [shards](WanBlockImpl& b) { shards->gather(b); };
    co.after = [shards](WanBlockImpl& b) { shards->release(b); };
  }
  enable_block_checkpointing(*r.model, co);
  r.model->train();
  r.forcing = {kSpanChunks, r.cfg.chunk_frames, r.cfg.level_shift, r.cfg.clean_first_frame};
  r.grid = training_grid();
  r.grid_weights = training_weights(r.grid);
}

void build_optimizer(CausalRun& r) {
  std::vector<std::string> names;
  for (const auto& [n, p] : r.lora) names.push_back(n);
  AdamWConfig oc;
  oc.beta1 = 0.9, oc.beta2 = 0.999, oc.state_dtype = torch::kFloat32;
  r.opt = std::make_unique<AdamW>(std::vector<AdamWGroup>{{"lora", r.lora_params, r.cfg.lr, 0.01, names}}, oc);
  r.sync = std::make_unique<ReplicatedGrads>(r.lora_params, *r.comm);
}

// Continue from the newest lora_step file in --out (the seed's rule), exactly when the state slot has that step.
void build_resume(CausalRun& r) {
  const auto [step, path] = newest_lora_step(r.cfg.out);
  if (step == 0) {
    if (!r.cfg.init_lora.empty()) {
      load_lora(*r.model, read_lora(r.cfg.init_lora), "--init-lora " + r.cfg.init_lora);
      r.resume_how = "fresh run from --init-lora " + r.cfg.init_lora;
    } else {
      r.resume_how = "fresh run, new LoRA (B = 0)";
    }
    return;
  }
  VDT_CHECK(step <= r.total_steps, r.cfg.out, " already holds ", path, " (step ", step, ") past this run's ",
            r.total_steps, " steps; use another --out or more --steps/--epochs");
  r.start_step = step;
  std::vector<std::string> notes;
  auto st = find_causal_state(r.cfg.out, step, &notes);
  if (st) {
    torch::NoGradGuard ng;
    for (auto& [name, p] : r.lora) {
      VDT_CHECK(st->tensors->contains("lora." + name), st->dir, ": no factor 'lora.", name, "' (different --lora-rank or "
                "model?)");
      auto t = st->tensors->get("lora." + name);
      VDT_CHECK(t.sizes() == p.sizes(), st->dir, ": factor ", name, " is ", t.sizes(), ", this run's is ", p.sizes(),
                " (--lora-rank ", r.cfg.lora_rank, ")");
      p.copy_(t);
    }
    r.opt->load_state([&](const std::string& k) { return st->tensors->get("optim." + k); }, st->dir);
    r.samples_base = st->pos.samples_seen;
    r.state_slot = st->dir;
    r.resume_how = "exact resume after step " + std::to_string(step) + " from " + st->dir + " (float32 LoRA, AdamW "
                   "moments, sample position " + std::to_string(st->pos.samples_seen) + ")";
    if (st->pos.world != r.world)
      r.resume_how += "; world size " + std::to_string(st->pos.world) + " -> " + std::to_string(r.world) +
                      ": the same global sample stream continues";
  } else {
    auto w = read_lora(path);
    load_lora(*r.model, w, path);
    r.samples_base = step * r.world;
    r.resume_how = "resume after step " + std::to_string(step) + " from " + path + " (no state slot for it: " +
                   (notes.empty() ? std::string("none written") : notes.back()) +
                   "; optimizer moments start afresh, as the seed)";
  }
}

// train_log.jsonl lines after the resumed step are dropped (a run killed after logging, before saving).
void trim_jsonl(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  in.close();
  std::ofstream(path, std::ios::trunc) << kept;
}

// The objective's loss on one window, with per-chunk levels and noise from the streams (level_purpose, key) and
// (noise_purpose, key).
torch::Tensor window_loss(CausalRun& r, const CausalSample& s, uint32_t level_purpose, uint32_t noise_purpose,
                          uint64_t key) {
  std::vector<double> u;
  for (int64_t c = 0; c < kSpanChunks; ++c) u.push_back(RngStream(r.cfg.seed, level_purpose).uniform(key, 0, c));
  auto x0 = s.latents.unsqueeze(0).to(r.device, r.dtype);  // [1, C, span, H, W]
  auto gen = make_generator(r.device, RngStream(r.cfg.seed, noise_purpose).u64(key, 0));
  auto noise = torch::randn(x0.sizes(), gen, x0.options().dtype(torch::kFloat32)).to(r.dtype);
  const bool tf = r.cfg.objective == "tf";
  const auto ex = tf ? make_tf_example(x0, noise, u, r.forcing, r.grid, r.grid_weights)
                     : make_df_example(x0, noise, u, r.forcing, r.grid, r.grid_weights);
  torch::Tensor context, context_ids;
  r.ds->text_of(s.text_rows, &context, &context_ids);                  // [R, Lt, text_dim], [1, span]
  if (tf) context_ids = torch::cat({context_ids, context_ids}, 1);  // [1, 2 span]: the clean copy's cells too
  DiTInputs in{ex.x_t, ex.t, context.to(r.device, r.dtype), context_ids.to(r.device), {}, {}, r.cfg.chunk_frames, tf};
  return df_loss(r.model->forward(in), ex, r.forcing);
}

// Mean loss over every val window (rank r takes windows r, r + world, ...), fixed levels and noise per window.
double validate(CausalRun& r) {
  torch::NoGradGuard ng;
  const int64_t n = static_cast<int64_t>(r.ds->val().size());
  auto sum = torch::zeros({1}, torch::TensorOptions().device(r.device).dtype(torch::kFloat32));
  for (int64_t i = r.rank; i < n; i += r.world) {
    const auto s = r.ds->load(r.ds->val()[static_cast<size_t>(i)], r.ds->val_start(i));
    sum += window_loss(r, s, kValPurpose, kValPurpose + 1, static_cast<uint64_t>(i)).to(torch::kFloat32);
  }
  r.comm->all_reduce(sum)->wait();
  return n > 0 ? sum.item<double>() / static_cast<double>(n) : 0.0;
}

void log_validation(CausalRun& r, int64_t step) {
  const double v = validate(r);
  if (r.rank != 0) return;
  std::printf("val step %lld: loss %.4f over %zu windows\n", static_cast<long long>(step), v, r.ds->val().size());
  std::ofstream(fs::path(r.cfg.out) / "val_log.jsonl", std::ios::app)
      << nlohmann::json{{"step", step}, {"val_loss", v}, {"windows", r.ds->val().size()}}.dump() << "\n";
}

struct StepStats {
  double loss = 0, grad_norm = 0, lr = 0, data_time = 0;
  bool stop = false;  // a signal reached some rank
  std::string clip;
};

StepStats train_step(CausalRun& r, int64_t it) {
  StepStats st;
  // 1) this rank's window: global sample g of a stream that depends on (seed, epoch, sample) only
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(r.ds->train().size());
  const int64_t g = r.samples_base + (it - r.start_step) * r.world + r.rank;
  const int64_t epoch = g / n;
  if (epoch != r.perm_epoch) r.perm = epoch_permutation(r.cfg.seed, epoch, n), r.perm_epoch = epoch;
  const int64_t index = r.perm[static_cast<size_t>(g % n)];
  const auto s = r.ds->load(r.ds->train()[static_cast<size_t>(index)], r.ds->train_start(index, epoch));
  st.clip = s.clip_id + "@" + std::to_string(s.start);
  st.data_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // 2) forward and loss with levels and noise keyed by g; backward (LoRA gradients all-reduced as they complete)
  auto loss = window_loss(r, s, kLevelPurpose, kNoisePurpose, static_cast<uint64_t>(g));
  loss.backward();
  r.sync->finish();
  // 4) clip, schedule, update; the loss and the stop flag over the ranks; a non-finite loss or norm skips the update
  auto stat = torch::stack({loss.detach().to(torch::kFloat32),
                            torch::full({}, StopOnSignal::requested() ? 1.0f : 0.0f, loss.options().dtype(torch::kFloat32))});
  r.comm->all_reduce(stat)->wait();
  auto norm = clip_grad_norm(r.lora_params, 1.0);
  const double ratio = r.cfg.lr_min / r.cfg.lr;
  r.opt->groups()[0].lr = r.cfg.lr * warmup_cosine_factor(it, r.cfg.warmup, r.total_steps, ratio);
  auto found_inf = (~torch::isfinite(norm) | ~torch::isfinite(stat[0])).to(torch::kFloat32);
  r.opt->step(found_inf);
  r.opt->zero_grad();
  const auto host = torch::cat({stat, norm.to(torch::kFloat32).reshape({1})}).to(torch::kCPU);  // one sync
  st.loss = host[0].item<double>() / r.world;
  st.stop = host[1].item<double>() > 0;
  st.grad_norm = host[2].item<double>();
  st.lr = r.cfg.lr * warmup_cosine_factor(it + 1, r.cfg.warmup, r.total_steps, ratio);  // as the seed logs it
  return st;
}

std::string save(CausalRun& r, int64_t step) {
  const std::string path = lora_step_path(r.cfg.out, step);
  if (r.rank == 0) {
    NamedTensors bf16;
    for (const auto& [n, p] : r.lora) bf16.emplace_back(n, p.detach().to(torch::kBFloat16).to(torch::kCPU));
    save_safetensors(path, bf16,
                     {{"format", "pt"}, {"base", r.cfg.model}, {"weights", r.cfg.weights}, {"step", std::to_string(step)},
                      {"objective", r.cfg.objective}, {"span_chunks", std::to_string(kSpanChunks)},
                      {"level_shift", py_float(r.cfg.level_shift)}, {"chunk_frames", std::to_string(r.cfg.chunk_frames)},
                      {"rank", std::to_string(r.cfg.lora_rank)}, {"alpha", py_float(r.cfg.lora_alpha)},
                      {"seed", std::to_string(r.cfg.seed)}, {"val_clips", std::to_string(r.cfg.val_clips)},
                      {"clean_first_frame", r.cfg.clean_first_frame ? "1" : "0"}});
    NamedTensors f32;
    for (const auto& [n, p] : r.lora) f32.emplace_back(n, p.detach().to(torch::kCPU));
    NamedTensors optim;
    for (const auto& [k, t] : r.opt->state()) optim.emplace_back(k, t.to(torch::kCPU));
    const int64_t seen = r.samples_base + (step - r.start_step) * r.world;
    r.state_slot = save_causal_state(r.cfg.out, r.state_slot, {step, seen, r.world}, f32, optim, r.cfg.to_json());
    std::printf("[save] %s; state %s\n", path.c_str(), r.state_slot.c_str());
  }
  r.comm->barrier();
  return path;
}

void write_run_files(const CausalRun& r) {
  fs::create_directories(r.cfg.out);
  nlohmann::json val = nlohmann::json::array();
  for (size_t i = 0; i < r.ds->val().size(); ++i)
    val.push_back({r.ds->clips()[static_cast<size_t>(r.ds->val()[i].clip)].clip_id,
                   r.ds->val_start(static_cast<int64_t>(i))});
  std::ofstream(fs::path(r.cfg.out) / "val_samples.json") << val.dump();
  std::ofstream(fs::path(r.cfg.out) / "args.json") << r.cfg.to_json();
}

void print_config(const CausalRun& r) {
  int64_t trainable = 0;
  for (const auto& p : r.lora_params) trainable += p.numel();
  std::printf("vdt train causal\n"
              "  objective %s  span %lld chunks x %lld frames  level_shift %s  attn %s  act_offload %s  clean first %s\n"
              "  model %s%s%s  device %s  precision %s  world %d (%s)\n"
              "  data %s: train %zu windows, val %zu (val_samples.json), flagged clips dropped %lld, too short %lld\n"
              "  LoRA rank %lld alpha %s: %.2fM trainable; frozen base %.1fM%s\n"
              "  steps %lld (%s), lr %s -> %s, warmup %lld, save every %lld; %s\n",
              r.cfg.objective.c_str(), static_cast<long long>(kSpanChunks), static_cast<long long>(r.cfg.chunk_frames),
              py_float(r.cfg.level_shift).c_str(), r.cfg.attn.c_str(), r.cfg.act_offload.c_str(),
              r.cfg.clean_first_frame ? "yes" : "no", r.cfg.model.c_str(), r.cfg.weights.empty() ? " (random base, non-zero head)" : " ",
              r.cfg.weights.c_str(), r.device.str().c_str(), r.cfg.precision.c_str(), r.world,
              r.comm->describe().c_str(), r.cfg.data_root.c_str(),
              r.ds->train().size(), r.ds->val().size(), static_cast<long long>(r.ds->n_flagged()),
              static_cast<long long>(r.ds->n_short()), static_cast<long long>(r.cfg.lora_rank),
              py_float(r.cfg.lora_alpha).c_str(), trainable / 1e6, r.base_params / 1e6,
              r.shards ? (", blocks sharded: " + std::to_string(r.shards->shard_bytes() >> 20) + " MiB of " +
                          std::to_string(r.shards->full_bytes() >> 20) + " MiB per rank").c_str()
                       : "", static_cast<long long>(r.total_steps),
              r.cfg.steps > 0 ? "--steps" : "epochs x windows / world", py_float(r.cfg.lr).c_str(),
              py_float(r.cfg.lr_min).c_str(), static_cast<long long>(r.cfg.warmup),
              static_cast<long long>(r.cfg.save_every), r.resume_how.c_str());
  std::fflush(stdout);
}

}  // namespace

WanDiT build_causal_base(const std::string& model, const std::string& weights, uint64_t seed,
                         const torch::Device& device, torch::ScalarType dtype) {
  WanDiT m(preset_config(model), torch::TensorOptions().device(device).dtype(dtype));
  m->init_weights(seed);
  if (weights.empty()) {  // a random base for tests and benchmarks: Wan's zero head would pass no gradient
    torch::NoGradGuard ng;
    auto gen = make_generator(torch::kCPU, RngStream(seed, rng_purpose::kRandomBaseHead).u64(~0ull, 1));
    auto& w = m->head->head->weight;
    w.copy_(torch::randn(w.sizes(), gen) * (1.0 / std::sqrt(static_cast<double>(w.size(1)))));
    return m;
  }
  auto set = SafetensorsSet::open(weight_files(weights, "--weights"));
  VDT_CHECK(!set.contains("gc_sem_cond.patch.weight"), "--weights ", weights, " holds the gc_sem_cond adapter; the "
            "causal trainer trains a LoRA on a plain Wan DiT (no semantic-map input yet). Give the base weights.");
  load_weights(*m, set);
  return m;
}

CausalSummary train_causal(const CausalConfig& cfg) {
  auto single = make_single_rank();
  return train_causal(cfg, *single, 0);
}

CausalSummary train_causal(const CausalConfig& cfg, Communicator& comm, int device_index) {
  cfg.validate();
  CausalRun r;
  r.cfg = cfg, r.comm = &comm, r.rank = comm.rank(), r.world = comm.world();
  build_device(r, device_index);
  build_data(r);
  build_model(r);
  build_optimizer(r);
  build_resume(r);
  const std::string log_path = (fs::path(cfg.out) / "train_log.jsonl").string();
  if (r.rank == 0) {
    write_run_files(r);
    trim_jsonl(log_path, r.start_step);
    print_config(r);
  }
  CausalSummary sum;
  sum.start_step = r.start_step, sum.total_steps = r.total_steps, sum.resume_how = r.resume_how;
  StopOnSignal stop_on_signal;  // SIGTERM / SIGINT: finish the step, save, exit 0 (a re-run continues)
  if (r.rank == 0) trim_jsonl((fs::path(cfg.out) / "val_log.jsonl").string(), r.start_step);
  if (cfg.val_every > 0 && r.start_step == 0) log_validation(r, 0);
  const auto t_start = std::chrono::steady_clock::now();
  int64_t step = r.start_step;
  StepTrace trace;  // VDT_TRACE / VDT_TRACE_STEP: a profiler trace of one step (benchmarks)
  while (step < r.total_steps) {
    trace.before_step(step + 1);
    const StepStats st = train_step(r, step);
    trace.after_step(++step);
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    if (!std::isfinite(st.loss))  // reduced over ranks: every rank stops here, the update was skipped
      VDT_FAIL("step ", step, ": loss = ", st.loss, " (non-finite); the update was skipped and training stops. The "
               "last LoRA ", sum.last_lora.empty() ? "(none yet)" : sum.last_lora, " and its state are intact.\n"
               "---> HINT: lower --lr, or check the data with `vdt data check`");
    if (step == r.start_step + 1) sum.first_loss = st.loss;
    sum.last_loss = st.loss;
    sum.losses.push_back(st.loss), sum.grad_norms.push_back(st.grad_norm);
    const double per_step = el / static_cast<double>(step - r.start_step);
    if (r.rank == 0) {
      std::printf("step %lld/%lld loss_v=%.4f gnorm=%.3f lr=%.2e mem=%.1fG %.2fs/step eta=%.2fh data=%.3fs %s\n",
                  static_cast<long long>(step), static_cast<long long>(r.total_steps), st.loss, st.grad_norm, st.lr,
                  peak_memory_gb(r.device), per_step, (r.total_steps - step) * per_step / 3600, st.data_time,
                  st.clip.c_str());
      std::ofstream(log_path, std::ios::app)
          << nlohmann::json{{"step", step}, {"loss_v", st.loss}, {"gnorm", st.grad_norm}, {"lr", st.lr}, {"sec", el}}
                 .dump()
          << "\n";
    }
    if (cfg.val_every > 0 && (step % cfg.val_every == 0 || step == r.total_steps)) log_validation(r, step);
    const bool stop = st.stop && step < r.total_steps;
    if (step % cfg.save_every == 0 || step == r.total_steps || stop) sum.last_lora = save(r, step);
    if (stop) {
      if (r.rank == 0)
        std::printf("[stop] %s: stopped after step %lld of %lld; the LoRA and state are saved. Re-run the same command "
                    "to continue.\n", StopOnSignal::signal_name(), static_cast<long long>(step),
                    static_cast<long long>(r.total_steps));
      sum.stopped = true;
      break;
    }
  }
  std::fflush(stdout);
  sum.steps = step;
  sum.s_per_step = step > r.start_step ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() /
                                             static_cast<double>(step - r.start_step)
                                       : 0;
  sum.peak_mem_gb = peak_memory_gb(r.device);
  for (const auto& [n, p] : r.lora) {
    auto c = p.detach().to(torch::kCPU).contiguous();
    sum.lora_crc = static_cast<uint32_t>(::crc32(sum.lora_crc, static_cast<const Bytef*>(c.data_ptr()),
                                                 static_cast<uInt>(c.numel() * c.element_size())));
    sum.lora.emplace_back(n, c.clone());
  }
  if (r.world > 1) std::printf("[done] rank %d of %d: LoRA CRC-32 %08x\n", r.rank, r.world, sum.lora_crc);
  return sum;
}

}  // namespace vdt
