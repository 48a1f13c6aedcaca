#include "generate/model_inputs.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/error.h"
#include "data/causal_dataset.h"
#include "model/embeddings.h"

namespace vdt {

DenoiserInputs model_inputs(const Denoiser& model, const torch::Tensor& x, const torch::Tensor& t,
                            const torch::Tensor& context, const torch::Tensor& context_ids,
                            const torch::Tensor& sem_ids, AttentionPattern attention) {
  const auto device = model.device();
  const auto dtype = model.compute_dtype();
  DenoiserInputs in;
  in.x = x.to(device, dtype, /*non_blocking=*/true);
  if (!t.is_cuda() && t.dim() <= 2) {  // distinct timesteps found on the host, where they cost no sync
    auto rows = distinct_timestep_rows(t);
    in.t_rows = rows.rows.to(device, /*non_blocking=*/true);
    in.t_index = rows.index.to(device, /*non_blocking=*/true);
  }
  in.t = t.to(device, /*non_blocking=*/true);
  in.context = context.to(device, dtype, /*non_blocking=*/true);
  if (context_ids.defined()) in.context_ids = context_ids.to(device, /*non_blocking=*/true);
  if (model.has_sem_cond() && sem_ids.defined()) in.sem_ids = sem_ids.to(device, /*non_blocking=*/true);
  in.attention = attention;
  return in;
}

void add_window_conditioning(DenoiserInputs& in, const torch::Tensor& tags, const torch::Tensor& context_ids,
                             const std::map<std::string, torch::Tensor>& cond,
                             const std::map<std::string, torch::Tensor>& cond_noise) {
  const auto device = in.x.device();
  if (tags.defined())
    in.extra["text_tags"] = tags.index_select(0, context_ids[0].narrow(0, 0, 1)).to(device);  // [1, Lt]
  for (const auto& [name, latent] : cond) {
    auto it = cond_noise.find(name);
    VDT_CHECK(it != cond_noise.end(), "model inputs: the conditioning latent '", name, "' has no noise");
    in.extra[name] = latent.unsqueeze(0).to(device, in.x.scalar_type());  // [1, C, 1, H, W]
    in.extra[name + ".noise"] = it->second.to(device, in.x.scalar_type());
  }
}

void fit_side_streams(const Denoiser& model, CausalDataset& ds, int64_t span_frames, int64_t chunk_frames) {
  const auto carried = ds.stream_names();
  for (const auto& name : model.side_streams())
    if (std::find(carried.begin(), carried.end(), name) != carried.end())
      ds.set_stream_steps(name, model.side_stream_chunks(name, span_frames, chunk_frames).back());
}

void check_data_matches(const Denoiser& model, int64_t latent_channels, int64_t text_dim, const std::string& where,
                        const std::string& flag) {
  VDT_CHECK(latent_channels == model.latent_channels(), where, ": latent_channels ", latent_channels,
            " does not match ", flag, " (", model.family(), " ", model.preset(), " takes ", model.latent_channels(),
            " latent channels)");
  VDT_CHECK(text_dim == model.text_dim(), where, ": text_dim ", text_dim, " does not match ", flag, " (",
            model.family(), " ", model.preset(), " takes text rows ", model.text_dim(), " wide)");
}

}  // namespace vdt
