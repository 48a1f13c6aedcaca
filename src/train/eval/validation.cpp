// Validation. The grid point of a val timestep is the nearest training-grid point (seed timestep_id_for), and that
// grid value is what a row reports (200 -> 201.34, logged as val/mse_t201, as the Python trainer's run_validation). The
// example is built as in training (exact sigma, model timestep in the model's compute dtype, frame 0 clean); the loss
// is the unweighted MSE over frames 1.. so the numbers are comparable across timesteps.
#include "train/eval/validation.h"

#include <torch/torch.h>

#include "core/rng.h"
#include "core/rng_purposes.h"
#include "generate/model_inputs.h"
#include "diffusion/flow_match.h"

namespace vdt {

namespace {
double val_mse(Denoiser& model, const SftSample& s, const SftExample& ex, const TextTable& table) {
  auto batch = collate({s}, table);
  auto pred = model.forward(model_inputs(model, ex.x_t, ex.t, batch.context, batch.context_ids, batch.ids));
  return flow_mse(pred, ex.target.to(model.device(), model.compute_dtype()), /*skip_first_frame=*/true).item<double>();
}
}  // namespace

std::vector<ValRow> run_validation(Denoiser& model, const SftDataset& val, const ValConfig& cfg) {
  torch::NoGradGuard ng;
  const bool was_training = model.is_training();
  model.eval();
  const auto grid = training_grid();
  const auto weights = training_weights(grid);
  const RngStream noise_stream(cfg.seed, rng_purpose::kValNoise);
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(val.size()), cfg.max_clips);
  std::vector<ValRow> rows;
  for (double t : cfg.timesteps) {
    ValRow row;
    const int64_t id = nearest_index(grid, t);
    row.requested = t;
    row.timestep = grid.timesteps[id].item<double>();  // the grid point evaluated
    for (int64_t i = cfg.rank; i < n; i += cfg.world) {
      const auto cond = val.get_with(i, false, false);
      auto x0 = cond.latents.unsqueeze(0).to(torch::kFloat32);  // [1, C, F, H, W]
      auto gen = make_generator(torch::kCPU, noise_stream.u64(fnv1a64(cond.clip_id), static_cast<uint32_t>(t * 1000)));
      auto noise = torch::randn(x0.sizes(), gen, torch::kFloat32);
      const auto ex = make_sft_example(x0, noise, id, grid, weights, model.compute_dtype(), cfg.first_frame_cond);
      row.mse += val_mse(model, cond, ex, *val.text_table());
      if (cfg.variants) {
        row.mse_uncond += val_mse(model, val.get_with(i, false, true), ex, *val.text_table());
        row.mse_nulltext += val_mse(model, val.get_with(i, true, false), ex, *val.text_table());
      }
      ++row.n;
    }
    if (row.n > 0) {
      row.mse /= row.n, row.mse_uncond /= row.n, row.mse_nulltext /= row.n;
      row.gap_uncond = row.mse_uncond - row.mse;
      row.gap_nulltext = row.mse_nulltext - row.mse;
    }
    rows.push_back(row);
  }
  if (was_training) model.train();
  return rows;
}

}  // namespace vdt
