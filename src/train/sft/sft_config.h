// Configuration of `vdt train sft`: the Python trainer gc25d's flags with its names and defaults (docs/design.md §4),
// plus --model,
// --res and --precision. A plain struct with validate(); every field is declared once in fields() (flag, help; the
// default is the initialiser here), from which the CLI binds the flags and to_json writes the config. The knobs the
// causal trainer and `vdt bench step` share come from their sections (train/loop/config_sections.h), held here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/loop/config_sections.h"

namespace vdt {

struct SftConfig {
  // data
  std::string data_root, text_table, vocab = "parts", res = "832x480";
  std::string cond_type = "ids",
              cond_key = "ids";  // the Python trainer's (its only choices), recorded in config and exports
  double text_dropout = 0.1, cond_dropout = 0.05, mask_p = 0.5;
  bool include_dropped = false, first_frame_cond = true;
  int64_t limit = 0;
  int num_workers = 4;
  // model
  std::string model = "wan2.2-ti2v-5b", model_dir;
  bool random_init =
      false;  // train from random weights; required (and exclusive with --model_dir) when no base is given
  ComputeSection compute{.precision = "mixed"};  // --device, --precision, --fused-kernels, --fp8
  bool gradient_checkpointing = true;
  // --checkpointing: block or selective while gradient_checkpointing is on, none: off. (Spelled `= MemorySection()`:
  // with `memory;` GCC 12 at -O3 warns that its string may be used uninitialized in every SftConfig{}.)
  MemorySection memory = MemorySection();
  int64_t sem_hidden = 0;  // 0: min(512, model dim)
  // optimisation
  double lr = 1e-5, cond_lr = 1e-4, weight_decay = 0.01, grad_clip = 1.0;
  int64_t warmup_steps = 500, max_steps = 20000, batch_size = 1, grad_accum = 2;
  // saving, validation, logging
  int64_t save_every = 1000, val_every = 500, val_n = 16, log_every = 1;
  int64_t preview_steps = 8;  // at each validation on a root with vae.safetensors: Euler steps of val clip 0's sample
                              // preview (previews/, TensorBoard images); 0 = none
  bool save_state = true, val_uncond = true;
  std::string val_timesteps = "200,500,800";
  std::string output, resume;
  bool ignore_corrupt_state = false;  // --resume auto with every sealed slot corrupt: start from step 0 on purpose
  RandomSection random;               // --seed
  bool final_export = true;           // not a flag: `vdt bench step` times steps and skips the last step's export

  // Throws naming the flag, the value and the fix.
  void validate() const;
  std::vector<double> val_timestep_list() const;
  // The enum-like flags as enums (validate() checks them; an unknown value is an error naming the flag).
  Precision precision_mode() const;          // mixed, bf16 or fp32
  Checkpointing checkpointing_mode() const;  // none when --no-gradient_checkpointing
  // The memory knobs parsed once, with those the command line fixed: what the trainer hands the memory plan and,
  // planned or not, applies (train/plan/startup_plan.h).
  MemoryFlags memory_flags() const;
  std::string to_json() const;  // every field, for config.json and export metadata
  static const std::vector<ConfigField<SftConfig>>& fields();
};

}  // namespace vdt
