// Step benchmark through the real trainers. The synthetic root has warm-up + timed steps worth of clips (one window
// per clip for the causal trainer: a span of 6 chunks of frames/6 latent frames; the distillation's rollout of
// frames / the base's chunk), latents of the base's channels and
// text rows of its width; the run writes its logs and its last export into the work directory.
#include "tools/step_bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "core/device_flag.h"
#include "core/error.h"
#include "model/denoiser_registry.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"
#include "train/distill/distill_trainer.h"
#include "train/sft/sft_trainer.h"

namespace vdt {
namespace fs = std::filesystem;

namespace {
// Either trainer's precisions (each checks its own set when it starts) and every checkpointing mode.
const std::vector<PrecisionChoice> kPrecisions = {
    {Precision::bf16, "sft: weights and AdamW moments, as the peer; causal: a frozen bf16 base"},
    {Precision::mixed, "sft only: bf16 compute, fp32 masters"},
    {Precision::fp32, ""}};
const std::vector<Checkpointing> kCheckpointing = {Checkpointing::block, Checkpointing::selective, Checkpointing::none};
}  // namespace

void StepBenchConfig::validate() const {
  VDT_CHECK(trainer == "sft" || trainer == "causal" || trainer == "distill",
            "--trainer: expected sft, causal or distill, got '", trainer, "'");
  compute.validate(kPrecisions);
  const auto mode = memory.checkpointing_mode(kCheckpointing);
  check_selective_blocks(memory.selective_blocks, mode);
  causal_memory.validate(attention, memory, mode);
  memory.check_memory();
  VDT_CHECK(causal_memory.attn_keep == 0 || trainer == "causal", kAttnKeepFlag,
            " applies to the causal trainer "
            "(--trainer causal)");
  VDT_CHECK(trainer == "sft" || mode != Checkpointing::none,
            "--checkpointing none: the causal and distill trainers always checkpoints; expected block or selective");
  VDT_CHECK(trainer != "distill" || (critic_ratio >= 1 && steps % critic_ratio == 0), "--steps ", steps,
            ": with --trainer distill the timed steps are a multiple of --critic-ratio ", critic_ratio,
            " (the mean step holds one student update per ratio critic updates)");
  VDT_CHECK(trainer != "distill" || frames % natural_chunk_frames(model) == 0, "--frames ", frames,
            ": --trainer distill rolls out chunks of the base's ", natural_chunk_frames(model),
            " latents; expected a multiple");
  resolve_device(compute.device);  // early: a missing GPU stops before the synthetic root is written
  VDT_CHECK(steps > 0 && warmup >= 0, "--steps must be > 0 and --warmup >= 0");
  VDT_CHECK(frames > 1 && height > 0 && width > 0 && text_len > 0,
            "--frames (> 1), --height, --width, --text-len must be positive");
  VDT_CHECK(trainer != "causal" || frames % 6 == 0, "--frames ", frames,
            ": the causal trainer's span is 6 chunks; "
            "expected a multiple of 6");
  denoiser_family(model);
}

const std::vector<ConfigField<StepBenchConfig>>& StepBenchConfig::fields() {
  using C = StepBenchConfig;
  static const std::vector<ConfigField<C>> f = [] {
    std::vector<ConfigField<C>> f = {
        {"--trainer", "sft, causal or distill", &C::trainer},
        model_field(&C::model, denoiser_presets()),
        {"--frames", "latent frames (causal: the span, 6 chunks; distill: the rollout, chunks of the base's)",
         &C::frames},
        {"--height", "latent height", &C::height},
        {"--width", "latent width", &C::width},
        {"--text-len", "text tokens", &C::text_len},
        {"--steps", "timed steps", &C::steps},
        {"--warmup", "untimed warm-up steps", &C::warmup},
        {"--lora-rank", "causal, distill: LoRA rank (alpha = rank)", &C::lora_rank},
        {"--critic-ratio", "distill: a student update every N steps", &C::critic_ratio},
        {"--peak-tflops", "dense rate for MFU", &C::peak_tflops},
        {"--work-dir",
         "where the synthetic root and the run go (default: a temp dir, removed; several nodes: shared "
         "storage)",
         &C::work_dir},
    };
    for (auto&& section :
         {lift(&C::compute, ComputeSection::fields(kPrecisions)),
          lift(&C::memory, MemorySection::fields(kCheckpointing)),
          lift(&C::causal_memory, CausalMemorySection::fields()), lift(&C::attention, AttentionSection::fields())})
      f.insert(f.end(), section.begin(), section.end());
    return f;
  }();
  return f;
}

StepBenchResult run_step_bench(const StepBenchConfig& cfg, Communicator& comm, int device_index) {
  cfg.validate();
  const bool temp = cfg.work_dir.empty();
  // One directory for every rank: rank 0 writes the root, the others read it. Ranks started by one torchrun agent
  // share its pid; across nodes --work-dir must name shared storage.
  const auto key = comm.world() > 1 ? ::getppid() : ::getpid();
  const fs::path dir = temp ? fs::temp_directory_path() / ("vdt_bench_" + std::to_string(key)) : fs::path(cfg.work_dir);
  const auto probe = make_denoiser(cfg.model, {}, /*layers=*/1);  // widths only: one block, on the host
  const int total = cfg.warmup + cfg.steps;
  if (comm.rank() == 0) {
    fs::remove_all(dir / "data");
    fs::create_directories(dir);
    SynthConfig sc;
    sc.out = (dir / "data").string(), sc.latent_channels = probe->latent_channels(), sc.latent_frames = cfg.frames;
    sc.latent_h = cfg.height, sc.latent_w = cfg.width, sc.text_dim = probe->text_dim(), sc.text_len = cfg.text_len;
    sc.train_runs = 1, sc.train_clips_per_run = total * comm.world() + 1, sc.n_drop = 0;
    sc.model = probe->family();  // an H3 root brings Picture 1 (native: the target's grid) and the silent audio
    sc.val_runs = 1, sc.val_clips_per_run = 1;
    synth_root(sc);
  }
  comm.barrier();
  StepBenchResult r;
  r.tokens = cfg.frames * (cfg.height / 2) * (cfg.width / 2);
  // every non-text row the base runs on (an H3 base adds Picture 1 and the audio rows)
  const int64_t rows = r.tokens + probe->extra_rows(cfg.frames, cfg.height, cfg.width, cfg.frames / 6);
  if (cfg.trainer == "sft") {
    SftConfig c;
    c.data_root = (dir / "data").string(), c.output = (dir / "run").string();
    c.model = cfg.model, c.random_init = true;
    c.compute = cfg.compute, c.memory = cfg.memory;  // --checkpointing none: the trainer's own none
    c.max_steps = total, c.batch_size = 1, c.grad_accum = 1, c.warmup_steps = 0, c.val_every = 0, c.save_every = 0;
    c.save_state = false, c.final_export = false, c.num_workers = 2, c.text_dropout = c.cond_dropout = 0;
    c.res = std::to_string(cfg.width * 16) + "x" + std::to_string(cfg.height * 16);
    fs::remove_all(c.output);
    const auto s = train_sft(c, comm, device_index);
    r.step_s = s.step_times, r.losses = s.losses, r.peak_gib = s.peak_mem_gb, r.params = s.params;
    r.predicted_peak_gib = s.predicted_peak_gb;
    r.tflop_per_step = s.tflop_per_step;  // the trainer's count (Denoiser::train_flops)
  } else if (cfg.trainer == "distill") {
    DistillConfig c;
    c.data_root = (dir / "data").string(), c.out = (dir / "run").string();
    c.model = cfg.model, c.random_init = true, c.lora_rank = cfg.lora_rank, c.lora_alpha = cfg.lora_rank;
    c.compute = cfg.compute, c.memory = cfg.memory, c.attention = cfg.attention;
    c.chunk_frames = natural_chunk_frames(cfg.model), c.chunks = cfg.frames / c.chunk_frames;
    c.critic_ratio = cfg.critic_ratio, c.steps = total, c.save_every = total, c.val_clips = 1;
    fs::remove_all(c.out);
    const auto s = train_distill(c, comm, device_index);
    r.step_s = s.step_times, r.losses = s.critic_losses, r.peak_gib = s.peak_mem_gb;
    r.params = s.base_params + s.student_params + s.critic_params;
    r.predicted_peak_gib = s.predicted_peak_gb;
    r.tflop_per_step = s.tflop_per_step;  // a mean step's: rollouts, the exit steps' backward, teacher, critic
    std::vector<double> with, without;
    for (int i = cfg.warmup; i < total; ++i) {
      r.mean_s += r.step_s[static_cast<size_t>(i)] / cfg.steps;
      (i % cfg.critic_ratio == 0 ? with : without).push_back(r.step_s[static_cast<size_t>(i)]);  // step i + 1
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    r.student_step_s = median(with), r.critic_step_s = median(without);
  } else {
    CausalConfig c;
    c.data_root = (dir / "data").string(), c.out = (dir / "run").string();
    c.model = cfg.model, c.random_init = true, c.lora_rank = cfg.lora_rank, c.lora_alpha = cfg.lora_rank;
    c.init_lora = CausalConfig::kNoInitLora;  // a new LoRA on purpose (an H3 base asks for the choice)
    c.compute = cfg.compute, c.memory = cfg.memory, c.causal_memory = cfg.causal_memory, c.attention = cfg.attention;
    c.chunk_frames = cfg.frames / 6, c.steps = total, c.save_every = total, c.val_clips = 1, c.warmup = 0;
    fs::remove_all(c.out);
    const auto s = train_causal(c, comm, device_index);
    r.step_s = s.step_times, r.losses = s.losses, r.peak_gib = s.peak_mem_gb, r.params = s.params;
    r.predicted_peak_gib = s.predicted_peak_gb, r.host_pinned_gib = s.pinned_host_gb;
    r.tflop_per_step = s.tflop_per_step;  // the trainer's: a frozen base, block-causal pairs
  }
  VDT_CHECK(static_cast<int>(r.step_s.size()) == total, "bench: the run took ", r.step_s.size(), " steps, expected ",
            total);
  std::vector<double> timed(r.step_s.begin() + cfg.warmup, r.step_s.end());
  std::sort(timed.begin(), timed.end());
  r.median_s = timed[timed.size() / 2], r.min_s = timed.front(), r.max_s = timed.back();
  r.last_loss = r.losses.back();
  r.rows = rows + cfg.text_len;
  r.mfu = r.tflop_per_step / (cfg.trainer == "distill" ? r.mean_s : r.median_s) / cfg.peak_tflops;
  comm.barrier();
  if (temp && comm.rank() == 0) fs::remove_all(dir);
  return r;
}

}  // namespace vdt
