#include "train/loop/model_inputs.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

DenoiserInputs model_inputs(const Denoiser& model, const torch::Tensor& x, const torch::Tensor& t,
                            const torch::Tensor& context, const torch::Tensor& context_ids,
                            const torch::Tensor& sem_ids, AttentionPattern attention) {
  const auto device = model.device();
  const auto dtype = model.compute_dtype();
  DenoiserInputs in;
  in.x = x.to(device, dtype, /*non_blocking=*/true);
  in.t = t.to(device, /*non_blocking=*/true);
  in.context = context.to(device, dtype, /*non_blocking=*/true);
  if (context_ids.defined()) in.context_ids = context_ids.to(device, /*non_blocking=*/true);
  if (model.has_sem_cond() && sem_ids.defined()) in.sem_ids = sem_ids.to(device, /*non_blocking=*/true);
  in.attention = attention;
  return in;
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
