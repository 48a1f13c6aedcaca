// What the SFT run logs, as the Python trainer writes it (docs/design.md §4): config.json's facts and the start-up
// table, train_log.csv (19 columns) and val_log.csv with their TensorBoard tags (train/<name>, val/<name>_t<T>,
// val/<name>_mean), the console lines, and the metadata an export records. Not here: how the files are written
// (train/loop/run_log, train/checkpoint/export).
#pragma once
#include <torch/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "train/eval/validation.h"
#include "train/loop/run_log.h"
#include "train/sft/sft_config.h"

namespace vdt {

class SftDataset;
class Denoiser;
struct SemCondConfig;

// Facts for config.json and the start-up table: dataset counts, val clip ids, geometry, model, groups, environment.
nlohmann::ordered_json run_facts(const SftConfig& cfg, const SftDataset& train, const SftDataset* val,
                                 const Denoiser& model, const SemCondConfig& sem, int64_t n_micro,
                                 int64_t steps_per_epoch, const torch::Device& device, int64_t cond_params,
                                 int64_t dit_params, int world = 1);

const std::vector<std::string>& sft_train_columns();
const std::vector<std::string>& sft_val_columns();

// The run's logs: the start-up table, config.json (config_resume<N>.json when resuming at step N > 0), the CSVs'
// columns, every flag for the HParams dashboard.
// `knobs`: the memory knobs the run applies (train/plan/startup_plan.h).
RunLogSpec sft_log_spec(const SftConfig& cfg, const MemoryKnobs& knobs, const nlohmann::ordered_json& facts,
                        int64_t resumed_step);

// A logged step: `values` by column name (every column but step and clips), its row, train/ scalars (not epoch and
// timestep; plus sem_over_x) and the console line with the ETA.
void log_sft_step(RunLog& log, int64_t step, int64_t max_steps,
                  const std::vector<std::pair<std::string, double>>& values, const std::string& clips);
// `variants`: the uncond / nulltext rows were run (--val_uncond); without them only mse is logged.
void log_sft_validation(RunLog& log, int64_t step, const std::vector<ValRow>& rows, bool variants);

// What an export records beside the config: the root's format, the adapter's geometry, where the weights came from.
struct SftExportFacts {
  std::string data_format;
  const SemCondConfig& sem;
  std::string init_ckpt, resumed_from;
  int64_t resumed_step = 0;  // 0 unless resumed
};
// An export's metadata: the Python trainer's export_metadata keys, every value a string as its {k: str(v)} writes
// them (Python's str() of floats and bools), then ours (format, sem_scale, sem_hidden, model_config, hyperparameters).
Metadata sft_export_metadata(const SftConfig& cfg, const Denoiser& model, const SftExportFacts& facts, int64_t step);

}  // namespace vdt
