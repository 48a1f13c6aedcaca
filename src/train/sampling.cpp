// Sampling. Both branches see the same noise and the same first frame; only the conditions differ.
#include "train/sampling.h"

#include <torch/torch.h>

#include "core/rng.h"
#include "train/validation.h"

namespace vdt {

SampleResult sample_clip(WanDiTImpl& model, const SftDataset& ds, size_t index, const EulerConfig& cfg, uint64_t seed) {
  torch::NoGradGuard ng;
  model.eval();
  const auto device = model.patch_embedding->weight.device();
  const auto dtype = model.patch_embedding->weight.scalar_type();
  const auto& table = *ds.text_table();
  auto branch = [&](const SftSample& s) -> VelocityFn {
    auto b = std::make_shared<SftBatch>(collate({s}, table));
    return [&model, b, device, dtype](const torch::Tensor& x, const torch::Tensor& t) {
      DiTInputs in;
      in.x = x.to(device, dtype);
      in.t = t.to(device);
      in.context = b->context.to(device, dtype);
      in.context_ids = b->context_ids.to(device);
      if (model.has_sem_cond()) in.sem_ids = b->ids.to(device);
      return model.forward(in).to(torch::kFloat32);
    };
  };
  const auto cond = ds.get_with(index, false, false);
  const auto uncond = ds.get_with(index, true, true);
  auto x0 = cond.latents.unsqueeze(0).to(device, torch::kFloat32);  // [1, C, F, H, W]
  auto gen = make_generator(torch::kCPU, RngStream(seed, 0x73616d70 /* "samp" */).u64(fnv1a64(cond.clip_id), 0));
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
