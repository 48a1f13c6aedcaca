// SftConfig validation: everything that can be checked before touching data or a device.
#include "train/sft/sft_config.h"

#include <nlohmann/json.hpp>
#include <cmath>
#include <sstream>

#include "core/device_flag.h"
#include "core/error.h"

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

Precision SftConfig::precision_mode() const {
  if (precision == "mixed") return Precision::mixed;
  if (precision == "bf16") return Precision::bf16;
  VDT_CHECK(precision == "fp32", "--precision: expected mixed (bf16 compute, fp32 master weights), bf16 (pure bf16) or "
            "fp32, got '", precision, "'");
  return Precision::fp32;
}

Checkpointing SftConfig::checkpointing_mode() const {
  const auto m = parse_checkpointing(checkpointing, "--checkpointing");
  VDT_CHECK(gradient_checkpointing || m != Checkpointing::selective, "--checkpointing selective and "
            "--no-gradient_checkpointing contradict each other; give one (--checkpointing none turns it off too)");
  return gradient_checkpointing ? m : Checkpointing::none;
}

void SftConfig::validate() const {
  VDT_CHECK(!data_root.empty(), "--data_root is required (a data root as in docs/data_format.md)");
  VDT_CHECK(!output.empty(), "--output is required (the run directory)");
  VDT_CHECK(vocab == "parts" || vocab == "ids", "--vocab: expected parts or ids, got '", vocab, "'");
  VDT_CHECK(cond_type == "ids", "--cond_type: expected ids (semantic id maps, the seed's only choice), got '", cond_type, "'");
  VDT_CHECK(cond_key == "ids", "--cond_key: expected ids (the key of cond/*.npz, the seed's only choice), got '", cond_key,
            "'");
  VDT_CHECK(!model_dir.empty() || random_init, "--model_dir is required: the base weights (a directory of *.safetensors "
            "shards, e.g. Wan2.2-TI2V-5B); without them the DiT would train from random weights\n---> HINT: pass "
            "--model_dir DIR, or --random-init to train from random weights on purpose (tests, benchmarks)");
  VDT_CHECK(model_dir.empty() || !random_init, "--random-init and --model_dir ", model_dir, " contradict each other; "
            "give one");
  for (auto [name, p] : {std::pair{"--text_dropout", text_dropout}, {"--cond_dropout", cond_dropout}, {"--mask_p", mask_p}})
    VDT_CHECK(p >= 0 && p <= 1, name, ": ", p, " is not a probability in [0, 1]");
  precision_mode();
  check_selective_blocks(selective_blocks, checkpointing_mode());
  parse_device_flag(device, "--device");
  VDT_CHECK(lr > 0 && cond_lr > 0, "--lr and --cond_lr must be positive");
  VDT_CHECK(weight_decay >= 0, "--weight_decay must be >= 0");
  VDT_CHECK(std::isfinite(grad_clip) && grad_clip >= 0, "--grad_clip ", grad_clip, ": expected a finite number >= 0 "
            "(the largest global gradient norm; 0 turns clipping off)");
  VDT_CHECK(sem_hidden >= 0, "--sem_hidden ", sem_hidden, ": expected >= 1 (the gc_sem_cond width), or 0 for "
            "min(512, model dim)");
  VDT_CHECK(max_steps > 0, "--max_steps must be positive, got ", max_steps);
  VDT_CHECK(batch_size > 0, "--batch_size must be positive, got ", batch_size);
  VDT_CHECK(grad_accum > 0, "--grad_accum must be positive, got ", grad_accum);
  VDT_CHECK(num_workers >= 0, "--num_workers must be >= 0");
  VDT_CHECK(warmup_steps >= 0 && save_every >= 0 && val_every >= 0 && val_n >= 0 && log_every > 0 && limit >= 0 &&
                preview_steps >= 0,
            "--warmup_steps, --save_every, --val_every, --val_n, --limit, --preview_steps must be >= 0 and --log_every > 0");
  const auto x = res.find('x');
  VDT_CHECK(x != std::string::npos && x > 0 && x + 1 < res.size(), "--res: expected WIDTHxHEIGHT like 832x480, got '", res, "'");
  val_timestep_list();
  VDT_CHECK(fused_kernels == "on" || fused_kernels == "off", "--fused-kernels: expected on or off, got '", fused_kernels,
            "'");
  fp8_mode();
}

Fp8Mode SftConfig::fp8_mode() const { return parse_fp8(fp8, "--fp8"); }

const std::vector<ConfigField<SftConfig>>& SftConfig::fields() {
  using C = SftConfig;
  static const std::vector<ConfigField<C>> f = {
      {"--data_root", "data root (docs/data_format.md)", &C::data_root, true},
      {"--text_table", "text table (default <data_root>/text_table.safetensors)", &C::text_table},
      {"--vocab", "condition vocabulary: parts (K=20) or ids (K=10)", &C::vocab},
      {"--cond_type", "condition type: ids (semantic id maps; the seed's only choice, recorded in the exports)", &C::cond_type},
      {"--cond_key", "key read from cond/*.npz: ids (the seed's only choice, recorded in the exports)", &C::cond_key},
      {"--res", "resolution WxH; must equal dataset.json res (env GC_RES)", &C::res},
      {"--text_dropout", "per sample: all cells -> null prompt", &C::text_dropout},
      {"--cond_dropout", "per sample: all ids -> 255", &C::cond_dropout},
      {"--mask_p", "per sample: world-anchored UNKNOWN mask (when cond kept)", &C::mask_p},
      {"--include_dropped", "keep drop:true rows in train (never in val)", &C::include_dropped},
      {"--first_frame_cond", "frame 0 clean with timestep 0, excluded from the loss (default on)", &C::first_frame_cond, false, true},
      {"--limit", "use only this many train clips (0 = all)", &C::limit},
      {"--num_workers", "loader threads", &C::num_workers},
      {"--model", "model preset: wan2.2-ti2v-5b, wan2.1-t2v-1.3b, tiny", &C::model},
      {"--model_dir", "directory of base weights (*.safetensors shards); required unless --random-init", &C::model_dir},
      {"--random-init", "train from random weights (no --model_dir): tests, benchmarks, the demo", &C::random_init},
      {"--precision", "mixed (bf16 compute, fp32 master), bf16 (pure bf16) or fp32", &C::precision},
      {"--device", "auto, cpu, cuda or cuda:N (torchrun: each rank takes GPU LOCAL_RANK)", &C::device},
      {"--gradient_checkpointing", "per-block activation checkpointing (default on)", &C::gradient_checkpointing, false, true},
      {"--fused-kernels", "on: the fused elementwise kernels (model/kernels: CUDA on GPUs, their ATen fallback elsewhere); off: the reference ops", &C::fused_kernels},
      {"--fp8", "FP8 GEMMs (E4M3, row-wise scales) for the linears of every block but the first and last: off, on (a CUDA GPU of compute capability 8.9+), fast (on, with fast accumulation in every FP8 GEMM: faster, less exact) or emulate (on's numerics in fp32 ops on any device: checks, tests)", &C::fp8},
      {"--checkpointing", "block (keep block inputs), selective (also keep GEMM and attention outputs, recompute "
                          "the elementwise work) or none", &C::checkpointing},
      {kSelectiveBlocksFlag, kSelectiveBlocksHelp, &C::selective_blocks},
      {"--sem_hidden", "gc_sem_cond width (0 = min(512, model dim))", &C::sem_hidden},
      {"--lr", "learning rate of the DiT", &C::lr},
      {"--cond_lr", "learning rate of gc_sem_cond.*", &C::cond_lr},
      {"--weight_decay", "AdamW weight decay (both groups)", &C::weight_decay},
      {"--grad_clip", "global gradient-norm clip (logged grad_norm is pre-clip); 0 = no clipping", &C::grad_clip},
      {"--warmup_steps", "linear warmup steps, then constant", &C::warmup_steps},
      {"--max_steps", "optimizer steps", &C::max_steps},
      {"--batch_size", "micro batch per process (one timestep per micro batch)", &C::batch_size},
      {"--grad_accum", "micro batches per optimizer step", &C::grad_accum},
      {"--save_every", "export step-N.safetensors every N steps (and at the end)", &C::save_every},
      {"--save_state", "also save the training state (default on)", &C::save_state, false, true},
      {"--val_every", "validate every N steps (0 = never)", &C::val_every},
      {"--val_n", "validation clips", &C::val_n},
      {"--val_timesteps", "validation timesteps", &C::val_timesteps},
      {"--val_uncond", "also run uncond and nulltext variants (default on)", &C::val_uncond, false, true},
      {"--log_every", "log every N steps", &C::log_every},
      {"--preview_steps", "Euler steps of the preview drawn at each validation on a root with a preview VAE "
                          "(vae.safetensors, synthetic roots): val clip 0 sampled (rows: ground truth, with conditions, "
                          "without) into previews/ and TensorBoard; 0 = no preview", &C::preview_steps},
      {"--output", "run directory; a relative path is taken from the current directory (the seed resolves it "
                   "against its project root) and recorded absolute in config.json", &C::output, true},
      {"--resume", "X.safetensors: warm start (weights only, step 0); a run directory, state_A/B or state: continue exactly from its newest complete state; auto: the newest state in --output, or a fresh start", &C::resume},
      {"--ignore_corrupt_state", "with --resume auto: when every sealed state slot in --output is corrupt, start "
                                 "from step 0 anyway (without it that is an error listing the slots)", &C::ignore_corrupt_state},
      {"--seed", "seed of every random stream (an integer >= 0)", &C::seed},
  };
  return f;
}

std::string SftConfig::to_json() const { return fields_to_json(*this, fields(), JsonValues::typed).dump(2); }

}  // namespace vdt
