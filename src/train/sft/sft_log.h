// What the SFT run logs, as the Python trainer writes it (docs/design.md §4): config.json's facts and the start-up
// table, train_log.csv (19 columns) and val_log.csv with their TensorBoard tags (train/<name>, val/<name>_t<T>,
// val/<name>_mean), and the console lines. Not here: how the files are written (train/loop/run_log).
#pragma once
#include <torch/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

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
RunLogSpec sft_log_spec(const SftConfig& cfg, const nlohmann::ordered_json& facts, int64_t resumed_step);

// A logged step: `values` by column name (every column but step and clips), its row, train/ scalars (not epoch and
// timestep; plus sem_over_x) and the console line with the ETA.
void log_sft_step(RunLog& log, int64_t step, int64_t max_steps,
                  const std::vector<std::pair<std::string, double>>& values, const std::string& clips);
// `variants`: the uncond / nulltext rows were run (--val_uncond); without them only mse is logged.
void log_sft_validation(RunLog& log, int64_t step, const std::vector<ValRow>& rows, bool variants);

}  // namespace vdt
