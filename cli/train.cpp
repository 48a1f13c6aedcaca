// `vdt train sft`: the seed gc25d's flags with its names and defaults (SPEC §4), plus --model, --res, --precision,
// --device. `vdt train causal`: the seed rtcwm's flags (SPEC §5), plus --model, --weights, --chunk-frames,
// --lora-rank, --lora-alpha and the data, device and sharding flags.
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <sstream>
#include <vector>

#include "cli/commands.h"
#include "distributed/communicator.h"
#include "train/causal/causal_trainer.h"
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

std::unique_ptr<Communicator> communicator_for(const LaunchEnv& env, std::string& device) {
  if (env.world > 1 && device == "auto") device = "cuda";
  return make_communicator(env, device == "cpu" ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, env.local_rank));
}

void add_train(CLI::App& app, int& exit_code) {
  auto* train = app.add_subcommand("train", "Train a model");
  train->require_subcommand(1);
  auto c = std::make_shared<SftConfig>();
  if (const char* res = std::getenv("GC_RES")) c->res = res;  // the seed's environment override
  auto* s = train->add_subcommand("sft", "Full-parameter SFT with the gc_sem_cond adapter and per-cell text (seed gc25d)");
  // data
  s->add_option(spellings("--data_root"), c->data_root, "data root (docs/data_format.md)")->required();
  s->add_option(spellings("--text_table"), c->text_table, "text table (default <data_root>/text_table.safetensors)");
  s->add_option(spellings("--vocab"), c->vocab, "condition vocabulary: parts (K=20) or ids (K=10)")->capture_default_str();
  s->add_option(spellings("--res"), c->res, "resolution WxH; must equal dataset.json res (env GC_RES)")->capture_default_str();
  s->add_option(spellings("--text_dropout"), c->text_dropout, "per sample: all cells -> null prompt")->capture_default_str();
  s->add_option(spellings("--cond_dropout"), c->cond_dropout, "per sample: all ids -> 255")->capture_default_str();
  s->add_option(spellings("--mask_p"), c->mask_p, "per sample: world-anchored UNKNOWN mask (when cond kept)")->capture_default_str();
  s->add_flag(spellings("--include_dropped"), c->include_dropped, "keep drop:true rows in train (never in val)")->option_text(default_of(c->include_dropped));
  s->add_flag(spellings("--first_frame_cond,!--no-first_frame_cond"), c->first_frame_cond,
              "frame 0 clean with timestep 0, excluded from the loss (default on)")->option_text(default_of(c->first_frame_cond));
  s->add_option(spellings("--limit"), c->limit, "use only this many train clips (0 = all)")->capture_default_str();
  s->add_option(spellings("--num_workers"), c->num_workers, "loader threads")->capture_default_str();
  // model
  s->add_option(spellings("--model"), c->model, "model preset: wan2.2-ti2v-5b, wan2.1-t2v-1.3b, tiny")->capture_default_str();
  s->add_option(spellings("--model_dir"), c->model_dir, "directory of base weights (*.safetensors shards); empty = random init");
  s->add_option(spellings("--precision"), c->precision, "mixed (bf16 compute, fp32 master), bf16 (pure bf16) or fp32")
      ->capture_default_str();
  s->add_option(spellings("--device"), c->device, "auto, cpu or cuda")->capture_default_str();
  s->add_flag(spellings("--gradient_checkpointing,!--no-gradient_checkpointing"), c->gradient_checkpointing,
              "per-block activation checkpointing (default on)")->option_text(default_of(c->gradient_checkpointing));
  s->add_option(spellings("--sem_hidden"), c->sem_hidden, "gc_sem_cond width (0 = min(512, model dim))")->capture_default_str();
  // optimisation
  s->add_option(spellings("--lr"), c->lr, "learning rate of the DiT")->capture_default_str();
  s->add_option(spellings("--cond_lr"), c->cond_lr, "learning rate of gc_sem_cond.*")->capture_default_str();
  s->add_option(spellings("--weight_decay"), c->weight_decay, "AdamW weight decay (both groups)")->capture_default_str();
  s->add_option(spellings("--warmup_steps"), c->warmup_steps, "linear warmup steps, then constant")->capture_default_str();
  s->add_option(spellings("--grad_clip"), c->grad_clip, "global gradient-norm clip (logged grad_norm is pre-clip)")
      ->capture_default_str();
  s->add_option(spellings("--max_steps"), c->max_steps, "optimizer steps")->capture_default_str();
  s->add_option(spellings("--batch_size"), c->batch_size, "micro batch per process (one timestep per micro batch)")
      ->capture_default_str();
  s->add_option(spellings("--grad_accum"), c->grad_accum, "micro batches per optimizer step")->capture_default_str();
  // saving, validation, logging
  s->add_option(spellings("--save_every"), c->save_every, "export step-N.safetensors every N steps (and at the end)")
      ->capture_default_str();
  s->add_flag(spellings("--save_state,!--no-save_state"), c->save_state, "also save the training state (default on)")->option_text(default_of(c->save_state));
  s->add_option(spellings("--val_every"), c->val_every, "validate every N steps (0 = never)")->capture_default_str();
  s->add_option(spellings("--val_n"), c->val_n, "validation clips")->capture_default_str();
  s->add_option(spellings("--val_timesteps"), c->val_timesteps, "validation timesteps")->capture_default_str();
  s->add_flag(spellings("--val_uncond,!--no-val_uncond"), c->val_uncond, "also run uncond and nulltext variants (default on)")->option_text(default_of(c->val_uncond));
  s->add_option(spellings("--log_every"), c->log_every, "log every N steps")->capture_default_str();
  s->add_option(spellings("--output"), c->output, "run directory")->required();
  s->add_option(spellings("--resume"), c->resume,
                "X.safetensors: warm start (weights only, step 0); a run directory, state_A/B or state: continue "
                "exactly from its newest complete state; auto: the newest state in --output, or a fresh start");
  s->add_option(spellings("--seed"), c->seed, "seed of every random stream")->capture_default_str();
  s->callback([c, &exit_code] {
    const auto env = LaunchEnv::from_env();  // torchrun / Slurm; none: one process
    const auto comm = communicator_for(env, c->device);
    const auto sum = train_sft(*c, *comm, env.local_rank);
    if (env.rank != 0) {
      exit_code = 0;
      return;
    }
    if (sum.steps > sum.start_step)
      std::printf("%s steps %lld..%lld: loss %.4f -> %.4f; last export %s%s%s\n",
                  sum.stopped ? "stopped by a signal after" : "trained", static_cast<long long>(sum.start_step + 1),
                  static_cast<long long>(sum.steps), sum.first_loss, sum.last_loss,
                  sum.last_export.empty() ? "(none)" : sum.last_export.c_str(), sum.state_dir.empty() ? "" : "; state ",
                  sum.state_dir.c_str());
    exit_code = 0;  // a signal stop too: the state is saved, a scheduler may re-queue the job
  });
  add_train_causal(*train, exit_code);
}

void add_train_causal(CLI::App& train, int& exit_code) {
  auto c = std::make_shared<CausalConfig>();
  auto* s = train.add_subcommand("causal", "Causal LoRA on a frozen Wan base with diffusion forcing on block-causal "
                                           "6-chunk spans (seed rtcwm)");
  // the seed's flags
  s->add_option(spellings("--out"), c->out, "run directory; re-running with the same --out continues from its newest "
                "lora_stepNNNNN.safetensors")->required();
  s->add_option(spellings("--objective"), c->objective, "df (diffusion forcing) or tf (teacher forcing)")->capture_default_str();
  s->add_option(spellings("--init-lora"), c->init_lora, "LoRA to start from (ours or PEFT names); empty = new LoRA, B = 0");
  s->add_option(spellings("--steps"), c->steps, "0 = epochs * samples / world")->capture_default_str();
  s->add_option(spellings("--epochs"), c->epochs, "epochs over the train windows (when --steps is 0)")->capture_default_str();
  s->add_option(spellings("--lr"), c->lr, "peak learning rate")->capture_default_str();
  s->add_option(spellings("--lr-min"), c->lr_min, "cosine floor")->capture_default_str();
  s->add_option(spellings("--warmup"), c->warmup, "linear warmup steps")->capture_default_str();
  s->add_option(spellings("--save-every"), c->save_every, "lora_stepNNNNN.safetensors every N steps (and at the end)")
      ->capture_default_str();
  s->add_option(spellings("--val-clips"), c->val_clips, "clips held out for validation (val_samples.json)")->capture_default_str();
  s->add_option(spellings("--max-samples"), c->max_samples, "smoke tests: cap the training set (0 = all)")->capture_default_str();
  s->add_option(spellings("--seed"), c->seed, "seed of every random stream")->capture_default_str();
  s->add_option(spellings("--picture1"), c->picture1, "Picture 1 resolution: native or 2048 (MiniMax-H3 only)")
      ->capture_default_str();
  s->add_option(spellings("--attn"), c->attn, "block-causal attention: prefix (one SDPA call per chunk) or mask (one masked call); the seed's fa3 / flex "
                "mean the same two")
      ->capture_default_str();
  s->add_option(spellings("--level-shift"), c->level_shift, "DF: flow shift of the per-chunk noise levels")->capture_default_str();
  s->add_option(spellings("--act-offload"), c->act_offload, "on: checkpointed block inputs in pinned host memory")
      ->capture_default_str();
  // ours
  s->add_option(spellings("--data-root"), c->data_root, "data root (docs/data_format.md); latents may hold longer streams")
      ->required();
  s->add_option(spellings("--text-table"), c->text_table, "text table (default <data-root>/text_table.safetensors)");
  s->add_option(spellings("--model"), c->model, "base preset: wan2.2-ti2v-5b, wan2.1-t2v-1.3b, tiny")->capture_default_str();
  s->add_option(spellings("--weights"), c->weights, "base weights: a .safetensors file or a directory of shards; empty = random");
  s->add_option(spellings("--chunk-frames"), c->chunk_frames, "latent frames per chunk (a span is 6 chunks)")->capture_default_str();
  s->add_option(spellings("--lora-rank"), c->lora_rank, "LoRA rank")->capture_default_str();
  s->add_option(spellings("--lora-alpha"), c->lora_alpha, "LoRA alpha (scale = alpha / rank)")->capture_default_str();
  s->add_flag(spellings("--clean-first-frame"), c->clean_first_frame,
              "Picture-1 style: the span's first latent frame clean (timestep 0, no loss)")->option_text(default_of(c->clean_first_frame));
  s->add_option(spellings("--device"), c->device, "auto, cpu or cuda")->capture_default_str();
  s->add_option(spellings("--precision"), c->precision, "bf16 (frozen bf16 base, float32 LoRA) or fp32")->capture_default_str();
  s->add_option(spellings("--val-every"), c->val_every, "mean loss over the val windows every N steps and before the first "
                "(val_log.jsonl); 0 = never")->capture_default_str();
  s->add_option(spellings("--shard-base"), c->shard_base, "shard the frozen blocks over the ranks: auto (with several), on, off")
      ->capture_default_str();
  s->callback([c, &exit_code] {
    const auto env = LaunchEnv::from_env();  // torchrun / Slurm; none: one process
    const auto comm = communicator_for(env, c->device);
    const auto sum = train_causal(*c, *comm, env.local_rank);
    if (env.rank == 0 && sum.steps > sum.start_step)
      std::printf("%s steps %lld..%lld of %lld: loss %.4f -> %.4f, %.3f s/step, peak %.1f GiB; last LoRA %s\n",
                  sum.stopped ? "stopped by a signal after" : "trained", static_cast<long long>(sum.start_step + 1),
                  static_cast<long long>(sum.steps), static_cast<long long>(sum.total_steps), sum.first_loss,
                  sum.last_loss, sum.s_per_step, sum.peak_mem_gb, sum.last_lora.c_str());
    else if (env.rank == 0)
      std::printf("nothing to train: %s is at step %lld of %lld\n", c->out.c_str(), static_cast<long long>(sum.steps),
                  static_cast<long long>(sum.total_steps));
    exit_code = 0;  // a signal stop too: LoRA and state are saved, a scheduler may re-queue the job
  });
}

}  // namespace vdt::cli
