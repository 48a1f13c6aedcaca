// Sampling an SFT export's clip. Both branches see the same noise and the same first frame; only the conditions differ.
#include "generate/clip_sampling.h"

#include <torch/torch.h>

#include "core/rng.h"
#include "core/fnv1a.h"
#include "core/rng_purposes.h"
#include "generate/generation_model.h"
#include "generate/model_inputs.h"

namespace vdt {

SampleResult sample_clip(Denoiser& model, const SftDataset& ds, size_t index, const EulerConfig& cfg, uint64_t seed,
                         const std::string* prompt) {
  torch::NoGradGuard ng;
  const EvalScope eval(model);
  const auto device = model.device();
  const auto& table = *ds.text_table();
  auto branch = [&](const SftSample& s) -> VelocityFn {
    auto b = std::make_shared<SftBatch>(collate({s}, table));
    return [&model, b](const torch::Tensor& x, const torch::Tensor& t) {
      return model.forward(model_inputs(model, x, t, b->context, b->context_ids, b->ids)).to(torch::kFloat32);
    };
  };
  auto cond = ds.get_with(index, false, false);
  if (prompt) cond.text_rows.assign(cond.text_rows.size(), table.row_of(*prompt));  // every cell: the new prompt
  const auto uncond = ds.get_with(index, true, true);
  auto x0 = cond.latents.unsqueeze(0).to(device, torch::kFloat32);  // [1, C, F, H, W]
  auto gen = make_generator(torch::kCPU, RngStream(seed, rng_purpose::kSample).u64(fnv1a64(cond.clip_id), 0));
  auto noise = torch::randn(x0.sizes(), gen, torch::kFloat32).to(device);
  auto first = x0.slice(2, 0, 1);
  SampleResult r;
  r.clip_id = cond.clip_id;
  r.ground_truth = x0[0].cpu();
  r.conditioned = euler_sample(branch(cond), branch(uncond), noise, first, cfg)[0].cpu();
  r.unconditioned = euler_sample(branch(uncond), {}, noise, first, cfg)[0].cpu();
  return r;
}

}  // namespace vdt
