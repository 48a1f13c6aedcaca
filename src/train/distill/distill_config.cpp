#include "train/distill/distill_config.h"

#include <sstream>

#include "core/error.h"
#include "model/denoiser_registry.h"

namespace vdt {
namespace {
// The LoRAs are float32 over a frozen base, as the causal trainer's: no mixed precision.
const std::vector<PrecisionChoice> kPrecisions = {{Precision::bf16, "frozen bf16 base, float32 LoRAs"},
                                                  {Precision::fp32, ""}};
// Always checkpointed, as the causal trainer: the block runner is also where sharded frozen blocks are gathered.
const std::vector<Checkpointing> kCheckpointing = {Checkpointing::block, Checkpointing::selective};
}  // namespace

DistillConfig::History DistillConfig::history_mode() const {
  VDT_CHECK(history != "released",
            "--history released: the Self-Forcing code's gradient through the cache (its exit "
            "pass's keys written in place, overwritten by the clean re-run, so later chunks' gradients reach the exit "
            "pass while they attend the clean values) is not offered: vdt's cache never holds a pass's graph\n---> "
            "HINT: --history detach (the paper's: no gradient through the history)");
  VDT_CHECK(history == "detach",
            "--history: expected detach (no gradient through the cached history, as the "
            "paper), got '",
            history, "'");
  return History::detach;
}

DistillConfig::ShardBase DistillConfig::shard_mode() const {
  VDT_CHECK(shard_base == "auto" || shard_base == "on" || shard_base == "off",
            "--shard-base: expected auto, on or off, got '", shard_base, "'");
  return shard_base == "on" ? ShardBase::on : shard_base == "off" ? ShardBase::off : ShardBase::automatic;
}

Precision DistillConfig::precision_mode() const { return compute.precision_mode(kPrecisions); }

Checkpointing DistillConfig::checkpointing_mode() const { return memory.checkpointing_mode(kCheckpointing); }

MemoryFlags DistillConfig::memory_flags() const {
  return vdt::memory_flags(compute, kPrecisions, memory, kCheckpointing, nullptr, &attention);
}

std::vector<int64_t> DistillConfig::student_step_list() const {
  std::vector<int64_t> out;
  std::stringstream ss(student_steps);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VDT_CHECK(used == item.size() && !item.empty(), "--student-steps '", student_steps, "': '", item,
              "' is not an integer; expected a decreasing list such as 1000,750,500,250");
    VDT_CHECK(v > 0 && v <= 1000 && (out.empty() || v < out.back()), "--student-steps '", student_steps,
              "': expected steps in (0, 1000], strictly decreasing (the unshifted 1000-step clock)");
    out.push_back(v);
  }
  VDT_CHECK(!out.empty(), "--student-steps is empty; expected e.g. 1000,750,500,250");
  return out;
}

void DistillConfig::validate() const {
  VDT_CHECK(!out.empty(), "--out is required (the run directory; a re-run with the same --out continues)");
  VDT_CHECK(!data_root.empty(),
            "--data-root is required (a data root: its text, and Picture 1 on MiniMax-H3, "
            "condition the rollouts; its latents are not trained on: the rollout makes the video)");
  VDT_CHECK(!weights.empty() || random_init,
            "--weights is required: the frozen base (student, critic and teacher "
            "are this one base)\n---> HINT: pass --weights PATH, or --random-init for a random base on purpose "
            "(tests, benchmarks)");
  VDT_CHECK(weights.empty() || !random_init, "--random-init and --weights ", weights, " contradict each other");
  if (!model.empty()) denoiser_family(model);  // an unknown preset is an error listing the known ones
  VDT_CHECK(lora_rank == -1 || lora_rank >= 1, "--lora-rank ", lora_rank, ": expected >= 1 (or -1: --init-lora's)");
  VDT_CHECK(lora_alpha == -1 || lora_alpha > 0, "--lora-alpha ", lora_alpha, ": expected > 0 (or -1)");
  VDT_CHECK(critic_rank == -1 || critic_rank >= 1, "--critic-rank ", critic_rank, ": expected >= 1 (or -1)");
  VDT_CHECK(critic_alpha == -1 || critic_alpha > 0, "--critic-alpha ", critic_alpha, ": expected > 0 (or -1)");
  VDT_CHECK(teacher_cfg >= 0, "--teacher-cfg ", teacher_cfg, ": expected >= 0 (0: the base's, 1: no guidance)");
  history_mode();
  student_step_list();
  VDT_CHECK(shift >= 0, "--shift ", shift, ": expected > 0 (or 0: the base's sampling shift)");
  VDT_CHECK(chunks >= 1 && chunks <= 127, "--chunks ", chunks, ": expected 1..127");
  VDT_CHECK(student_step_list().size() <= 15, "--student-steps: at most 15 steps");
  VDT_CHECK(min_chunks >= 0 && min_chunks <= chunks, "--min-chunks ", min_chunks, ": expected 1..--chunks (", chunks,
            "), or 0: always --chunks");
  VDT_CHECK(chunk_frames >= 0, "--chunk-frames ", chunk_frames, ": expected >= 1 (0: the base's natural chunk)");
  VDT_CHECK(picture1 == "native" || picture1 == "2048", "--picture1: expected native or 2048, got '", picture1, "'");
  VDT_CHECK(steps >= 1, "--steps ", steps, ": expected >= 1");
  VDT_CHECK(critic_ratio >= 1, "--critic-ratio ", critic_ratio, ": expected >= 1 (critic updates per student update)");
  VDT_CHECK(lr > 0 && critic_lr > 0, "--lr ", lr, " / --critic-lr ", critic_lr, ": expected > 0");
  VDT_CHECK(beta1 >= 0 && beta1 < 1 && beta2 > 0 && beta2 < 1, "--beta1 ", beta1, " / --beta2 ", beta2,
            ": expected beta1 in [0, 1), beta2 in (0, 1)");
  VDT_CHECK(weight_decay >= 0, "--weight-decay ", weight_decay, ": expected >= 0");
  VDT_CHECK(grad_clip > 0, "--grad-clip ", grad_clip, ": expected > 0");
  VDT_CHECK(ema >= 0 && ema < 1, "--ema ", ema, ": expected a decay in [0, 1) (0: no EMA)");
  VDT_CHECK(ema_start >= 0, "--ema-start ", ema_start, ": expected >= 0");
  VDT_CHECK(save_every >= 1, "--save-every ", save_every, ": expected >= 1");
  VDT_CHECK(val_every >= 0, "--val-every ", val_every, ": expected >= 0 (0 = never)");
  VDT_CHECK(val_clips >= 0 && max_samples >= 0, "--val-clips / --max-samples: expected >= 0");
  compute.validate(kPrecisions);
  checkpointing_mode();
  check_selective_blocks(memory.selective_blocks, checkpointing_mode());
  memory.check_memory();
  attention.kernel();
  shard_mode();
}

const std::vector<ConfigField<DistillConfig>>& DistillConfig::fields() {
  using C = DistillConfig;
  static const auto compute = ComputeSection::fields(kPrecisions);
  static const auto memory = MemorySection::fields(kCheckpointing);
  static const std::vector<ConfigField<C>> f = {
      {"--out", "run directory; re-running with the same --out continues from its newest state slot", &C::out, true},
      {"--resume",
       "auto: continue exactly from the newest sealed state slot in --out (both LoRAs, both optimizers, the EMA, "
       "the step); a run directory, state_A/B or state of another run: continue exactly from it into --out",
       &C::resume},
      {"--ignore-corrupt-state", "when every sealed state slot in --out is corrupt, start afresh instead of stopping",
       &C::ignore_corrupt_state},
      {"--data-root",
       "data root (docs/data_format.md): its text (and Picture 1 on MiniMax-H3) condition the "
       "rollouts (its latents are not trained on: the rollout makes the video)",
       &C::data_root, true},
      {"--text-table", "text table (default <data-root>/text_table.safetensors)", &C::text_table},
      {"--model",
       "base preset (wan2.2-ti2v-5b, wan2.1-t2v-1.3b, tiny, minimax-h3, h3-tiny); empty = the data root's "
       "family and the preset of --weights' shapes (needed with --random-init)",
       &C::model},
      {"--weights",
       "the frozen base: student, critic and teacher are this one base (a .safetensors file or a "
       "directory of shards)",
       &C::weights},
      {"--random-init", "a random frozen base (no --weights): tests, benchmarks", &C::random_init},
      {"--init-lora",
       "the student's start: a `vdt train causal` LoRA; empty or none = a fresh LoRA (B = 0), said loudly",
       &C::init_lora},
      {"--teacher-lora", "a LoRA on the teacher (frozen); empty = the teacher is the base alone", &C::teacher_lora},
      {"--lora-rank", "the student LoRA's rank; -1 = --init-lora's, else 32", &C::lora_rank},
      {"--lora-alpha", "the student LoRA's alpha; -1 = --init-lora's, else the rank", &C::lora_alpha},
      {"--critic-rank", "the critic LoRA's rank (B = 0 at the start); -1 = the student's", &C::critic_rank},
      {"--critic-alpha", "the critic LoRA's alpha; -1 = its rank", &C::critic_alpha},
      {"--teacher-cfg",
       "the teacher's guidance against the negative prompt (uncond + cfg (cond - uncond), as "
       "`vdt sample --cfg`); 0 = the base's: Wan 4 (Self-Forcing's 3 in its cond + g (cond - "
       "uncond)), MiniMax-H3 1 (guidance-distilled); 1 = no unconditional pass",
       &C::teacher_cfg},
      {"--all-causal", "teacher and critic block-causal too (LongLive); default bidirectional", &C::all_causal},
      {"--history",
       "gradient through the cached history: detach (none, as the paper; the Self-Forcing code's "
       "gradient into earlier chunks' exit passes is not offered, docs/distill.md)",
       &C::history},
      {"--student-steps", "the student's steps on the unshifted 1000-step clock, mapped onto the --shift grid",
       &C::student_steps},
      {"--shift",
       "flow shift of the student's steps and the DMD timesteps; 0 = the base's sampling shift (Wan 5, "
       "MiniMax-H3 12)",
       &C::shift},
      {"--chunks", "chunks a rollout makes (at most the trained span unless the LoRA was trained longer)", &C::chunks},
      {"--min-chunks",
       "draw each step's chunk count in [--min-chunks, --chunks] (the same on every rank); 0 = "
       "always --chunks",
       &C::min_chunks},
      {"--chunk-frames", "latent frames per chunk; 0 = the base's: Wan 3, MiniMax-H3 5", &C::chunk_frames},
      {"--picture1", "Picture 1 resolution: native or 2048 (MiniMax-H3 only)", &C::picture1},
      {"--clean-first-frame", "the student LoRA's: the first latent frame is the clean conditioning frame",
       &C::clean_first_frame},
      {"--steps", "training steps (one critic update each)", &C::steps},
      {"--critic-ratio", "critic updates per student update: the student updates every N steps", &C::critic_ratio},
      {"--lr", "the student LoRA's learning rate", &C::lr},
      {"--critic-lr", "the critic LoRA's learning rate", &C::critic_lr},
      {"--beta1", "AdamW beta1 of both", &C::beta1},
      {"--beta2", "AdamW beta2 of both", &C::beta2},
      {"--weight-decay", "AdamW weight decay of both", &C::weight_decay},
      {"--grad-clip", "gradient-norm clip of each update", &C::grad_clip},
      {"--ema", "EMA decay of the student LoRA, saved beside it (0 = none)", &C::ema},
      {"--ema-start", "the step the EMA starts at (a copy of the student then)", &C::ema_start},
      {"--save-every", "the student LoRA (+ EMA) and the state every N steps (and at the end)", &C::save_every},
      {"--val-every",
       "every N steps: val window 0 streamed by the student at its steps (previews/, TensorBoard); "
       "0 = never",
       &C::val_every},
      {"--val-clips", "clips held out for validation (their text conditions the previews)", &C::val_clips},
      {"--max-samples", "smoke tests: cap the prompt windows (0 = all)", &C::max_samples},
      lift(&C::random, RandomSection::fields(), "--seed"),
      lift(&C::compute, compute, "--device"),
      lift(&C::compute, compute, "--precision"),
      lift(&C::compute, compute, "--fused-kernels"),
      lift(&C::compute, compute, "--fp8"),
      lift(&C::memory, memory, "--checkpointing"),
      lift(&C::memory, memory, kSelectiveBlocksFlag),
      lift(&C::memory, memory, "--memory"),
      lift(&C::attention, AttentionSection::fields(), "--attn"),
      {"--shard-base", "shard the frozen blocks over each node's ranks: auto (with several), on, off", &C::shard_base},
  };
  return f;
}

std::string DistillConfig::to_json() const { return fields_to_json(*this, fields(), JsonValues::typed).dump(1); }

}  // namespace vdt
