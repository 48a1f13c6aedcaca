// SftConfig validation: everything that can be checked before touching data or a device.
#include "train/sft/sft_config.h"

#include <nlohmann/json.hpp>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "model/denoiser_registry.h"

namespace vdt {

std::vector<double> SftConfig::val_timestep_list() const {
  std::vector<double> out;
  std::stringstream ss(val_timesteps);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (...) {
      used = 0;
    }
    // The whole item must be the number: "200abc" is a typo, not 200.
    VDT_CHECK(used > 0 && item.find_first_not_of(" ", used) == std::string::npos && std::isfinite(v),
              "--val_timesteps: '", item, "' is not a number (expected a comma-separated list like 200,500,800)");
    out.push_back(v);
    VDT_CHECK(out.back() >= 0 && out.back() <= 1000, "--val_timesteps: ", out.back(), " is outside [0, 1000]");
  }
  return out;
}

namespace {
// The precisions and checkpointing modes this trainer offers (the causal trainer has neither mixed nor none).
const std::vector<PrecisionChoice> kPrecisions = {{Precision::mixed, "bf16 compute, fp32 master weights and moments"},
                                                  {Precision::bf16, "pure bf16, the peer's"},
                                                  {Precision::fp32, ""}};
const std::vector<Checkpointing> kCheckpointing = {Checkpointing::block, Checkpointing::selective, Checkpointing::none};
}  // namespace

Precision SftConfig::precision_mode() const { return compute.precision_mode(kPrecisions); }

Checkpointing SftConfig::checkpointing_mode() const {
  const auto m = memory.checkpointing_mode(kCheckpointing);
  VDT_CHECK(gradient_checkpointing || m != Checkpointing::selective,
            "--checkpointing selective and "
            "--no-gradient_checkpointing contradict each other; give one (--checkpointing none turns it off too)");
  return gradient_checkpointing ? m : Checkpointing::none;
}

MemoryFlags SftConfig::memory_flags() const {
  MemoryFlags f = vdt::memory_flags(compute, kPrecisions, memory, kCheckpointing);
  f.knobs.checkpointing = checkpointing_mode();  // none with --no-gradient_checkpointing
  f.precision_given = memory.flag_given("--precision", compute.precision != SftConfig{}.compute.precision);
  if (f.given.checkpointing || memory.flag_given("--gradient_checkpointing", !gradient_checkpointing))
    f.given.checkpointing = f.knobs.checkpointing;
  return f;
}

void SftConfig::validate() const {
  VDT_CHECK(!data_root.empty(), "--data_root is required (a data root as in docs/data_format.md)");
  VDT_CHECK(!output.empty(), "--output is required (the run directory)");
  VDT_CHECK(vocab == "parts" || vocab == "ids", "--vocab: expected parts or ids, got '", vocab, "'");
  VDT_CHECK(cond_type == "ids", "--cond_type: expected ids (semantic id maps, the Python trainer's only choice), got '",
            cond_type, "'");
  VDT_CHECK(cond_key == "ids",
            "--cond_key: expected ids (the key of cond/*.npz, the Python trainer's only choice), got '", cond_key, "'");
  VDT_CHECK(!model_dir.empty() || random_init,
            "--model_dir is required: the base weights (a directory of *.safetensors "
            "shards, e.g. Wan2.2-TI2V-5B); without them the DiT would train from random weights\n---> HINT: pass "
            "--model_dir DIR, or --random-init to train from random weights on purpose (tests, benchmarks)");
  VDT_CHECK(model_dir.empty() || !random_init, "--random-init and --model_dir ", model_dir,
            " contradict each other; "
            "give one");
  for (auto [name, p] :
       {std::pair{"--text_dropout", text_dropout}, {"--cond_dropout", cond_dropout}, {"--mask_p", mask_p}})
    VDT_CHECK(p >= 0 && p <= 1, name, ": ", p, " is not a probability in [0, 1]");
  compute.validate(kPrecisions);
  check_selective_blocks(memory.selective_blocks, checkpointing_mode());
  memory.check_memory();
  VDT_CHECK(lr > 0 && cond_lr > 0, "--lr and --cond_lr must be positive");
  VDT_CHECK(weight_decay >= 0, "--weight_decay must be >= 0");
  VDT_CHECK(std::isfinite(grad_clip) && grad_clip >= 0, "--grad_clip ", grad_clip,
            ": expected a finite number >= 0 "
            "(the largest global gradient norm; 0 turns clipping off)");
  VDT_CHECK(sem_hidden >= 0, "--sem_hidden ", sem_hidden,
            ": expected >= 1 (the gc_sem_cond width), or 0 for "
            "min(512, model dim)");
  VDT_CHECK(max_steps > 0, "--max_steps must be positive, got ", max_steps);
  VDT_CHECK(batch_size > 0, "--batch_size must be positive, got ", batch_size);
  VDT_CHECK(grad_accum > 0, "--grad_accum must be positive, got ", grad_accum);
  VDT_CHECK(num_workers >= 0, "--num_workers must be >= 0");
  VDT_CHECK(
      warmup_steps >= 0 && save_every >= 0 && val_every >= 0 && val_n >= 0 && log_every > 0 && limit >= 0 &&
          preview_steps >= 0,
      "--warmup_steps, --save_every, --val_every, --val_n, --limit, --preview_steps must be >= 0 and --log_every > 0");
  const auto x = res.find('x');
  VDT_CHECK(x != std::string::npos && x > 0 && x + 1 < res.size(), "--res: expected WIDTHxHEIGHT like 832x480, got '",
            res, "'");
  val_timestep_list();
}

const std::vector<ConfigField<SftConfig>>& SftConfig::fields() {
  using C = SftConfig;
  static const auto compute = ComputeSection::fields(kPrecisions);
  static const auto memory = MemorySection::fields(kCheckpointing);
  static const std::vector<ConfigField<C>> f = {
      {"--data_root", "data root (docs/data_format.md)", &C::data_root, true},
      {"--text_table", "text embedding table (default <data_root>/text_table.safetensors)", &C::text_table},
      {"--vocab", "condition vocabulary: parts (K = 20) or ids (K = 10, parts folded by collapse_parts)", &C::vocab},
      {"--cond_type",
       "condition type: ids (semantic id maps, the Python trainer's only choice); recorded in "
       "config.json and the exports",
       &C::cond_type},
      {"--cond_key",
       "key read from cond/*: ids (the Python trainer's only choice); recorded in config.json and the "
       "exports",
       &C::cond_key},
      {"--res", "resolution WIDTHxHEIGHT; must equal dataset.json res (env GC_RES)", &C::res},
      {"--text_dropout", "per sample: every cell gets the null prompt", &C::text_dropout},
      {"--cond_dropout", "per sample: every id becomes 255 (UNKNOWN)", &C::cond_dropout},
      {"--mask_p", "per sample, when cond is kept: a world-anchored region of the ids becomes UNKNOWN", &C::mask_p},
      {"--include_dropped", "keep drop:true rows in train (never in val)", &C::include_dropped},
      {"--first_frame_cond",
       "frame 0's model timestep is 0 (on) or the drawn t (off); either way frame 0 is the clean "
       "latent and left out of the loss, as the Python trainer",
       &C::first_frame_cond, false, true},
      {"--limit", "use only this many train clips (0 = all)", &C::limit},
      {"--num_workers", "loader threads (the draws do not depend on them)", &C::num_workers},
      model_field(&C::model, family_presets("wan")),
      {"--model_dir",
       "directory of the base weights (*.safetensors, e.g. the 3 TI2V-5B shards); required unless "
       "--random-init. The start-up table and config.json (model.weight_files) name each file with "
       "its size and CRC-32",
       &C::model_dir},
      {"--random-init",
       "train from random weights, said explicitly (no --model_dir): tests, benchmarks, the demo; the "
       "start-up table says RANDOM INIT",
       &C::random_init},
      lift(&C::compute, compute, "--precision"),
      lift(&C::compute, compute, "--device"),
      {"--gradient_checkpointing",
       "per-block activation checkpointing; off is --checkpointing none (and with "
       "--checkpointing selective an error)",
       &C::gradient_checkpointing, false, true},
      lift(&C::compute, compute, "--fused-kernels"),
      lift(&C::compute, compute, "--fp8"),
      lift(&C::memory, memory, "--checkpointing"),
      lift(&C::memory, memory, kSelectiveBlocksFlag),
      lift(&C::memory, memory, "--memory"),
      {"--sem_hidden", "gc_sem_cond width (0 = min(512, model dim); negative is an error)", &C::sem_hidden},
      {"--lr", "AdamW learning rate of the DiT", &C::lr},
      {"--cond_lr", "AdamW learning rate of gc_sem_cond.*", &C::cond_lr},
      {"--weight_decay", "AdamW weight decay (both groups)", &C::weight_decay},
      {"--grad_clip",
       "global gradient-norm clip (the logged grad_norm is the pre-clip norm); 0 = no clipping; "
       "negative, NaN or Inf is an error",
       &C::grad_clip},
      {"--warmup_steps", "linear warmup min(1, (s+1)/warmup), then constant, both groups", &C::warmup_steps},
      {"--max_steps", "optimizer steps", &C::max_steps},
      {"--batch_size", "micro batch per process (one timestep per micro batch)", &C::batch_size},
      {"--grad_accum", "micro batches per optimizer step; an epoch's tail forms a short step", &C::grad_accum},
      {"--save_every", "export step-N.safetensors every N steps and at the end", &C::save_every},
      {"--save_state",
       "with every export (and at the end, and on SIGTERM/SIGINT) also write the training state into "
       "state_A/ or state_B/ (docs/resume.md)",
       &C::save_state, false, true},
      {"--val_every", "validate every N steps (0 = never)", &C::val_every},
      {"--val_n", "validation clips: the first N of the val split", &C::val_n},
      {"--val_timesteps",
       "validation timesteps; each is snapped to the nearest training-grid point, which is what is "
       "logged (200 -> 201.342, val/mse_t201), as the Python trainer",
       &C::val_timesteps},
      {"--val_uncond", "also the uncond and nulltext variants", &C::val_uncond, false, true},
      {"--log_every", "console line, CSV row and TensorBoard scalars every N steps", &C::log_every},
      {"--preview_steps",
       "Euler steps of the preview drawn at each validation on a root with a preview VAE "
       "(vae.safetensors, synthetic roots): val clip 0 sampled (CFG 5, as vdt sample; rows: ground "
       "truth, with conditions, without) into previews/step_NNNNNNN.png and TensorBoard; 0 = no "
       "preview. Its noise is its own stream: training numbers are the same with or without it",
       &C::preview_steps},
      {"--output",
       "run directory; a relative path is taken from the current directory (the Python trainer joins it "
       "to its project root) and recorded absolute in config.json",
       &C::output, true},
      {"--resume",
       "X.safetensors: warm start (weights only, step 0; a plain Wan export leaves the adapter zero); a "
       "run directory, state_A/B or state: continue exactly from its newest complete state; auto: the "
       "newest state in --output, or a fresh start when there is none",
       &C::resume},
      {"--ignore_corrupt_state",
       "with --resume auto: when every sealed state slot in --output is corrupt, start "
       "from step 0 anyway (without it that is an error listing the slots)",
       &C::ignore_corrupt_state},
      lift(&C::random, RandomSection::fields(), "--seed"),
  };
  return f;
}

std::string SftConfig::to_json() const { return fields_to_json(*this, fields(), JsonValues::typed).dump(2); }

}  // namespace vdt
