// Checkpoint tools behind `vdt ckpt` (docs/design.md §7): a summary of a checkpoint (keys, dtypes, parameters,
// metadata, detected preset), a check that reports every problem (key set against the detected or named preset,
// NaN/Inf, LoRA pairs), a per-key comparison of two checkpoints, and LoRA merging (model/lora.h). Not here: printing
// (cli/ckpt.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "train/loop/config_sections.h"

namespace vdt {

struct CkptSummary {
  int64_t tensors = 0, parameters = 0, bytes = 0;
  std::map<std::string, int64_t> dtypes;  // dtype -> tensor count
  std::string preset;                     // detected preset ("custom": a known family at other widths), "" if none
  std::string family;                     // "wan", "minimax-h3", or "" when the keys are neither
  int64_t lora_modules = 0, sem_cond_keys = 0;
  Metadata metadata;
};
CkptSummary inspect_ckpt(const SafetensorsSet& files);

// The command lines of `vdt ckpt inspect|check|diff|merge-lora` (docs/cli.md).
struct CkptFilesArgs {  // inspect
  std::vector<std::string> files;
  static const std::vector<ConfigField<CkptFilesArgs>>& fields();
};
struct CkptCheckArgs {
  std::vector<std::string> files;
  std::string model;  // empty: the detected preset
  static const std::vector<ConfigField<CkptCheckArgs>>& fields();
};
struct CkptDiffArgs {
  std::string a, b;
  static const std::vector<ConfigField<CkptDiffArgs>>& fields();
};
struct MergeLoraArgs {
  std::vector<std::string> base;
  std::string lora, out;
  double alpha = 0;  // 0: the file's alpha, else its rank
  static const std::vector<ConfigField<MergeLoraArgs>>& fields();
};

// `vdt ckpt quantize-base`: base weights in, their frozen block linears as FP8 out (distributed/fp8_base.h).
struct QuantizeBaseArgs {
  std::string weights, out, device = "cpu";
  static const std::vector<ConfigField<QuantizeBaseArgs>>& fields();
};

// Every problem, one line each, naming the key: missing or unexpected keys for a Wan DiT or a MiniMax-H3 DiT (against
// `preset`, or the detected one when empty; H3 shapes too), non-finite values, incomplete LoRA pairs. Empty: healthy.
std::vector<std::string> check_ckpt(const SafetensorsSet& files, const std::string& preset = "");

struct CkptDiffRow {
  std::string key, what;  // what: "only in A", "only in B", "shape", or "" for a numeric comparison
  double max_abs = 0, rel_l2 = 0;
};
// Keys of both, sorted; numeric rows compare in float64.
std::vector<CkptDiffRow> diff_ckpt(const SafetensorsSet& a, const SafetensorsSet& b);

}  // namespace vdt
