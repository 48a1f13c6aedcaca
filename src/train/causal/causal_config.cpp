#include "train/causal/causal_config.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "model/denoiser_registry.h"

namespace vdt {
namespace {
// The precisions and checkpointing modes this trainer offers: no mixed (the LoRA is fp32 over a frozen base), no none
// (always checkpointed: the block runner is also where sharded frozen blocks are gathered).
const std::vector<PrecisionChoice> kPrecisions = {{Precision::bf16, "frozen bf16 base, float32 LoRA"},
                                                  {Precision::fp32, ""}};
const std::vector<Checkpointing> kCheckpointing = {Checkpointing::block, Checkpointing::selective};
}  // namespace

void CausalConfig::validate() const {
  VDT_CHECK(!out.empty(), "--out is required (the run directory; a re-run with the same --out continues)");
  VDT_CHECK(!data_root.empty(), "--data-root is required (a data root, docs/data_format.md)");
  objective_mode();
  VDT_CHECK(steps >= 0, "--steps ", steps, ": expected >= 0 (0 = epochs * samples / world)");
  VDT_CHECK(steps > 0 || epochs > 0, "--epochs ", epochs, ": expected > 0 when --steps is 0");
  VDT_CHECK(lr > 0, "--lr ", lr, ": expected > 0");
  VDT_CHECK(lr_min >= 0 && lr_min <= lr, "--lr-min ", lr_min, ": expected 0 <= lr-min <= --lr (", lr, ")");
  VDT_CHECK(warmup >= 0, "--warmup ", warmup, ": expected >= 0");
  VDT_CHECK(save_every >= 1, "--save-every ", save_every, ": expected >= 1");
  VDT_CHECK(picture1 == "native" || picture1 == "2048", "--picture1: expected native or 2048, got '", picture1, "'");
  check_picture1_base();
  if (!model.empty()) denoiser_family(model);  // an unknown preset is an error listing the known ones
  attention.kernel();
  check_selective_blocks(memory.selective_blocks, checkpointing_mode());
  causal_memory.validate(attention, memory, checkpointing_mode());
  memory.check_memory();
  VDT_CHECK(level_shift > 0, "--level-shift ", level_shift, ": expected > 0");
  compute.validate(kPrecisions);
  // Left out (0): the base's natural chunk. Given, a chunk holds at least one latent frame; a 0 on the command line is
  // refused here, not later as "no clip is as long as the span".
  VDT_CHECK(chunk_frames >= 1 || (chunk_frames == 0 && memory.given.count("--chunk-frames") == 0), "--chunk-frames ",
            chunk_frames,
            ": expected >= 1 (latent frames per chunk; a span is 6 chunks)\n---> HINT: leave --chunk-frames "
            "out for the base's natural chunk (Wan 3, MiniMax-H3 5)");
  // Rank 0 or alpha 0 would make the LoRA's update zero: the run would train nothing.
  VDT_CHECK(lora_rank == -1 || lora_rank >= 1, "--lora-rank ", lora_rank,
            ": expected >= 1 (a rank-0 LoRA has no "
            "weights to train)\n---> HINT: leave --lora-rank out (the LoRA the run starts from decides, else ",
            kDefaultLoraRank, "), or give a rank such as ", kDefaultLoraRank);
  VDT_CHECK(lora_alpha == -1 || lora_alpha > 0, "--lora-alpha ", lora_alpha,
            ": expected > 0 (alpha 0 scales the "
            "LoRA's update to zero)\n---> HINT: leave --lora-alpha out (the LoRA the run starts from decides, else ",
            kDefaultLoraRank, ")");
  VDT_CHECK(!weights.empty() || random_init,
            "--weights is required: the frozen base (a .safetensors file or a "
            "directory of shards); without it the LoRA would train on a random base\n---> HINT: pass --weights PATH, "
            "or --random-init to train on a random base on purpose (tests, benchmarks)");
  VDT_CHECK(weights.empty() || !random_init, "--random-init and --weights ", weights,
            " contradict each other; give one");
  VDT_CHECK(val_every >= 0, "--val-every ", val_every, ": expected >= 0 (0 = never)");
  VDT_CHECK(preview_steps >= 0, "--preview-steps ", preview_steps, ": expected >= 0 (0 = no preview)");
  VDT_CHECK(val_sample_every >= 0 && (val_sample_every == 0 || preview_steps > 0), "--val-sample-every ",
            val_sample_every, ": expected >= 0 (0 = never), with --preview-steps >= 1 (its Euler steps)");
  shard_mode();
}

CausalConfig::Objective CausalConfig::objective_mode() const {
  VDT_CHECK(objective == "df" || objective == "tf",
            "--objective: expected df (diffusion forcing) or tf (teacher "
            "forcing), got '",
            objective, "'");
  return objective == "tf" ? Objective::tf : Objective::df;
}

void CausalConfig::check_picture1_base() const {
  VDT_CHECK(picture1 == "native" || model.empty() || takes_picture1(model),
            "--picture1 2048 applies to a "
            "MiniMax-H3 base (its Picture 1 image); the Wan bases (--model ",
            model, ") take --picture1 native");
}

Checkpointing CausalConfig::checkpointing_mode() const { return memory.checkpointing_mode(kCheckpointing); }

CausalConfig::ShardBase CausalConfig::shard_mode() const {
  VDT_CHECK(shard_base == "auto" || shard_base == "on" || shard_base == "off",
            "--shard-base: expected auto, on or "
            "off, got '",
            shard_base, "'");
  return shard_base == "on" ? ShardBase::on : shard_base == "off" ? ShardBase::off : ShardBase::automatic;
}

Precision CausalConfig::precision_mode() const { return compute.precision_mode(kPrecisions); }

MemoryFlags CausalConfig::memory_flags() const {
  return vdt::memory_flags(compute, kPrecisions, memory, kCheckpointing, &causal_memory, &attention);
}

const std::vector<ConfigField<CausalConfig>>& CausalConfig::fields() {
  using C = CausalConfig;
  static const auto compute = ComputeSection::fields(kPrecisions);
  static const auto memory = MemorySection::fields(kCheckpointing);
  static const std::vector<ConfigField<C>> f = {
      {"--out", "run directory; re-running with the same --out continues from its newest lora_stepNNNNN.safetensors",
       &C::out, true},
      {"--objective", "df (diffusion forcing) or tf (teacher forcing)", &C::objective},
      {"--init-lora",
       "LoRA to start from (ours, PEFT's or diffusers' names), or none: a new LoRA (B = 0). Left out: a new LoRA "
       "on a Wan base; on a MiniMax-H3 base an error asking for one of the two (the Python trainer continues the "
       "released CWM LoRA there)",
       &C::init_lora},
      {"--resume",
       "auto: continue from the newest lora_stepNNNNN in --out (exactly when its state slot is there: the "
       "Python trainer's re-run rule); X.safetensors: start from that LoRA (as --init-lora); a run "
       "directory, state_A/B or state of another run: continue exactly from its state, writing into --out",
       &C::resume},
      {"--ignore-corrupt-state",
       "when every sealed state slot in --out is corrupt, continue anyway from the newest "
       "lora_stepNNNNN with fresh AdamW moments (without it that is an error listing the "
       "slots)",
       &C::ignore_corrupt_state},
      {"--steps", "0 = epochs * samples / world", &C::steps},
      {"--epochs", "epochs over the train windows (when --steps is 0)", &C::epochs},
      {"--lr", "peak learning rate", &C::lr},
      {"--lr-min", "cosine floor", &C::lr_min},
      {"--warmup", "linear warmup steps", &C::warmup},
      {"--save-every", "lora_stepNNNNN.safetensors every N steps (and at the end)", &C::save_every},
      {"--val-clips", "clips held out for validation (val_samples.json)", &C::val_clips},
      {"--max-samples", "smoke tests: cap the training set (0 = all)", &C::max_samples},
      lift(&C::random, RandomSection::fields(), "--seed"),
      {"--picture1", "Picture 1 resolution: native or 2048 (MiniMax-H3 only)", &C::picture1},
      lift(&C::attention, AttentionSection::fields(), "--attn"),
      {"--level-shift", "DF: flow shift of the per-chunk noise levels", &C::level_shift},
      lift(&C::causal_memory, CausalMemorySection::fields(), "--act-offload"),
      lift(&C::memory, memory, "--checkpointing"),
      lift(&C::memory, memory, kSelectiveBlocksFlag),
      lift(&C::causal_memory, CausalMemorySection::fields(), kAttnKeepFlag),
      lift(&C::memory, memory, "--memory"),
      lift(&C::causal_memory, CausalMemorySection::fields(), "--stream-blocks"),
      lift(&C::causal_memory, CausalMemorySection::fields(), "--stream-prefetch"),
      lift(&C::causal_memory, CausalMemorySection::fields(), kBaseDtypeFlag),
      {"--data-root", "data root (docs/data_format.md); latents may hold longer streams", &C::data_root, true},
      {"--text-table", "text table (default <data-root>/text_table.safetensors)", &C::text_table},
      model_field(&C::model, denoiser_presets(),
                  "empty = the data root's family (model_family) and the preset of --weights' shapes (needed with "
                  "--random-init)"),
      {"--weights",
       "base weights: a .safetensors file or a directory of shards (with its index json); required unless "
       "--random-init",
       &C::weights},
      {"--random-init", "a random frozen base (no --weights): tests, benchmarks", &C::random_init},
      lift(&C::compute, compute, "--device"),
      lift(&C::compute, compute, "--precision"),
      {"--chunk-frames",
       "latent frames per chunk, >= 1 (a span is 6 chunks); left out (0): the base's, Wan 3, MiniMax-H3 5 (one VAE "
       "clip)",
       &C::chunk_frames},
      {"--lora-rank",
       "LoRA rank (>= 1); left out (-1): the starting LoRA file's (--init-lora, a re-run's newest "
       "lora_step), else 32. Given, it must equal that file's",
       &C::lora_rank},
      {"--lora-alpha",
       "LoRA alpha (> 0; scale = alpha / rank); left out (-1): the starting LoRA file's, else 32. "
       "Given, it must equal that file's",
       &C::lora_alpha},
      {"--clean-first-frame", "Picture-1 style: the span's first latent frame clean (timestep 0, no loss)",
       &C::clean_first_frame},
      {"--shard-base", "shard the frozen blocks over the ranks: auto (with several), on, off", &C::shard_base},
      lift(&C::compute, compute, "--fused-kernels"),
      lift(&C::compute, compute, "--fp8"),
      {"--val-every",
       "mean loss over the val windows before the first step, every N steps and at the last (val_log.jsonl); "
       "0 = never",
       &C::val_every},
      {"--preview-steps",
       "Euler steps of the preview drawn at each validation on a root with a preview VAE "
       "(vae.safetensors, synthetic roots): val window 0 sampled chunk by chunk, ground truth above "
       "sample, into previews/ and TensorBoard; 0 = no preview",
       &C::preview_steps},
      {"--val-sample-every",
       "every N steps: val window 0 streamed with the KV cache (--preview-steps Euler steps), "
       "the seconds per chunk and, on a root with a preview VAE, the frames in TensorBoard "
       "(stream/...); 0 = never",
       &C::val_sample_every},
  };
  return f;
}

std::string CausalConfig::to_json() const {
  return fields_to_json(*this, fields(), JsonValues::python_strings).dump(1);
}

LoraFileMeta CausalConfig::lora_file_meta(const Denoiser& base, int64_t step) const {
  // "base" as the base's own trainers name it; "model" names the preset either way.
  const auto info = base.lora_base_info();
  LoraFileMeta m;
  m.base = info.base, m.model = model, m.text_handling = info.text_handling, m.weights = weights;
  m.step = step, m.objective = objective, m.span_chunks = kSpanChunks, m.level_shift = level_shift;
  m.chunk_frames = chunk_frames, m.rank = lora_rank, m.alpha = lora_alpha, m.seed = random.seed;
  m.val_clips = val_clips, m.clean_first_frame = clean_first_frame, m.picture1 = picture1;
  m.targets = base.lora_targets();
  return m;
}

}  // namespace vdt
