// `vdt train sft`: the seed gc25d's flags with its names and defaults (SPEC §4), plus --model, --res, --precision,
// --device. `vdt train causal` comes with the causal workflow.
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "dist/communicator.h"
#include "train/sft_trainer.h"

namespace vdt::cli {

void add_train(CLI::App& app, int& exit_code) {
  auto* train = app.add_subcommand("train", "Train a model");
  train->require_subcommand(1);
  auto c = std::make_shared<SftConfig>();
  if (const char* res = std::getenv("GC_RES")) c->res = res;  // the seed's environment override
  auto* s = train->add_subcommand("sft", "Full-parameter SFT with the gc_sem_cond adapter and per-cell text (seed gc25d)");
  // data
  s->add_option("--data_root", c->data_root, "data root (docs/data_format.md)")->required();
  s->add_option("--text_table", c->text_table, "text table (default <data_root>/text_table.safetensors)");
  s->add_option("--vocab", c->vocab, "condition vocabulary: parts (K=20) or ids (K=10)")->capture_default_str();
  s->add_option("--res", c->res, "resolution WxH; must equal dataset.json res (env GC_RES)")->capture_default_str();
  s->add_option("--text_dropout", c->text_dropout, "per sample: all cells -> null prompt")->capture_default_str();
  s->add_option("--cond_dropout", c->cond_dropout, "per sample: all ids -> 255")->capture_default_str();
  s->add_option("--mask_p", c->mask_p, "per sample: world-anchored UNKNOWN mask (when cond kept)")->capture_default_str();
  s->add_flag("--include_dropped", c->include_dropped, "keep drop:true rows in train (never in val)");
  s->add_flag("--first_frame_cond,!--no-first_frame_cond", c->first_frame_cond,
              "frame 0 clean with timestep 0, excluded from the loss (default on)");
  s->add_option("--limit", c->limit, "use only this many train clips (0 = all)")->capture_default_str();
  s->add_option("--num_workers", c->num_workers, "loader threads")->capture_default_str();
  // model
  s->add_option("--model", c->model, "model preset: wan2.2-ti2v-5b, wan2.1-t2v-1.3b, tiny")->capture_default_str();
  s->add_option("--model_dir", c->model_dir, "directory of base weights (*.safetensors shards); empty = random init");
  s->add_option("--precision", c->precision, "mixed (bf16 compute, fp32 master), bf16 (pure bf16) or fp32")
      ->capture_default_str();
  s->add_option("--device", c->device, "auto, cpu or cuda")->capture_default_str();
  s->add_flag("--gradient_checkpointing,!--no-gradient_checkpointing", c->gradient_checkpointing,
              "per-block activation checkpointing (default on)");
  s->add_option("--sem_hidden", c->sem_hidden, "gc_sem_cond width (0 = min(512, model dim))")->capture_default_str();
  // optimisation
  s->add_option("--lr", c->lr, "learning rate of the DiT")->capture_default_str();
  s->add_option("--cond_lr", c->cond_lr, "learning rate of gc_sem_cond.*")->capture_default_str();
  s->add_option("--weight_decay", c->weight_decay, "AdamW weight decay (both groups)")->capture_default_str();
  s->add_option("--warmup_steps", c->warmup_steps, "linear warmup steps, then constant")->capture_default_str();
  s->add_option("--grad_clip", c->grad_clip, "global gradient-norm clip (logged grad_norm is pre-clip)")
      ->capture_default_str();
  s->add_option("--max_steps", c->max_steps, "optimizer steps")->capture_default_str();
  s->add_option("--batch_size", c->batch_size, "micro batch per process (one timestep per micro batch)")
      ->capture_default_str();
  s->add_option("--grad_accum", c->grad_accum, "micro batches per optimizer step")->capture_default_str();
  // saving, validation, logging
  s->add_option("--save_every", c->save_every, "export step-N.safetensors every N steps (and at the end)")
      ->capture_default_str();
  s->add_flag("--save_state,!--no-save_state", c->save_state, "also save the training state (default on)");
  s->add_option("--val_every", c->val_every, "validate every N steps (0 = never)")->capture_default_str();
  s->add_option("--val_n", c->val_n, "validation clips")->capture_default_str();
  s->add_option("--val_timesteps", c->val_timesteps, "validation timesteps")->capture_default_str();
  s->add_flag("--val_uncond,!--no-val_uncond", c->val_uncond, "also run uncond and nulltext variants (default on)");
  s->add_option("--log_every", c->log_every, "log every N steps")->capture_default_str();
  s->add_option("--output", c->output, "run directory")->required();
  s->add_option("--resume", c->resume,
                "X.safetensors: warm start (weights only, step 0); a run directory, state_A/B or state: continue "
                "exactly from its newest complete state; auto: the newest state in --output, or a fresh start");
  s->add_option("--seed", c->seed, "seed of every random stream")->capture_default_str();
  s->callback([c, &exit_code] {
    const auto env = LaunchEnv::from_env();  // torchrun / Slurm; none: one process
    if (env.world > 1 && c->device == "auto") c->device = "cuda";
    const auto comm = make_communicator(env, c->device == "cpu" ? torch::Device(torch::kCPU)
                                                                : torch::Device(torch::kCUDA, env.local_rank));
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
}

}  // namespace vdt::cli
