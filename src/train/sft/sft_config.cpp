// SftConfig validation: everything that can be checked before touching data or a device.
#include "train/sft/sft_config.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace vdt {

std::vector<double> SftConfig::val_timestep_list() const {
  std::vector<double> out;
  std::stringstream ss(val_timesteps);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    try {
      out.push_back(std::stod(item));
    } catch (...) {
      VDT_FAIL("--val_timesteps: '", item, "' is not a number (expected e.g. 200,500,800)");
    }
    VDT_CHECK(out.back() >= 0 && out.back() <= 1000, "--val_timesteps: ", out.back(), " is outside [0, 1000]");
  }
  return out;
}

void SftConfig::validate() const {
  VDT_CHECK(!data_root.empty(), "--data_root is required (a data root as in docs/data_format.md)");
  VDT_CHECK(!output.empty(), "--output is required (the run directory)");
  VDT_CHECK(vocab == "parts" || vocab == "ids", "--vocab: expected parts or ids, got '", vocab, "'");
  for (auto [name, p] : {std::pair{"--text_dropout", text_dropout}, {"--cond_dropout", cond_dropout}, {"--mask_p", mask_p}})
    VDT_CHECK(p >= 0 && p <= 1, name, ": ", p, " is not a probability in [0, 1]");
  VDT_CHECK(precision == "mixed" || precision == "bf16" || precision == "fp32", "--precision: expected mixed (bf16 compute, "
            "fp32 master weights), bf16 (pure bf16) or fp32, got '", precision, "'");
  VDT_CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device: expected auto, cpu or cuda, got '", device, "'");
  VDT_CHECK(lr > 0 && cond_lr > 0, "--lr and --cond_lr must be positive");
  VDT_CHECK(weight_decay >= 0, "--weight_decay must be >= 0");
  VDT_CHECK(max_steps > 0, "--max_steps must be positive, got ", max_steps);
  VDT_CHECK(batch_size > 0, "--batch_size must be positive, got ", batch_size);
  VDT_CHECK(grad_accum > 0, "--grad_accum must be positive, got ", grad_accum);
  VDT_CHECK(num_workers >= 0, "--num_workers must be >= 0");
  VDT_CHECK(warmup_steps >= 0 && save_every >= 0 && val_every >= 0 && val_n >= 0 && log_every > 0 && limit >= 0,
            "--warmup_steps, --save_every, --val_every, --val_n, --limit must be >= 0 and --log_every > 0");
  const auto x = res.find('x');
  VDT_CHECK(x != std::string::npos && x > 0 && x + 1 < res.size(), "--res: expected WIDTHxHEIGHT like 832x480, got '", res, "'");
  val_timestep_list();
}

std::string SftConfig::to_json() const {
  nlohmann::ordered_json j = {
      {"data_root", data_root}, {"text_table", text_table}, {"vocab", vocab}, {"res", res},
      {"text_dropout", text_dropout}, {"cond_dropout", cond_dropout}, {"mask_p", mask_p},
      {"include_dropped", include_dropped}, {"first_frame_cond", first_frame_cond}, {"limit", limit},
      {"num_workers", num_workers}, {"model", model}, {"model_dir", model_dir}, {"precision", precision},
      {"device", device}, {"gradient_checkpointing", gradient_checkpointing}, {"sem_hidden", sem_hidden},
      {"lr", lr}, {"cond_lr", cond_lr}, {"weight_decay", weight_decay}, {"grad_clip", grad_clip},
      {"warmup_steps", warmup_steps}, {"max_steps", max_steps}, {"batch_size", batch_size},
      {"grad_accum", grad_accum}, {"save_every", save_every}, {"save_state", save_state}, {"val_every", val_every},
      {"val_n", val_n}, {"val_timesteps", val_timesteps}, {"val_uncond", val_uncond}, {"log_every", log_every},
      {"output", output}, {"resume", resume}, {"seed", seed}};
  return j.dump(2);
}

}  // namespace vdt
