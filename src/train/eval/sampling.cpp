// Sampling. Both branches see the same noise and the same first frame; only the conditions differ.
#include "train/eval/sampling.h"

#include <torch/torch.h>

#include "core/rng.h"
#include "core/rng_purposes.h"
#include "train/loop/model_inputs.h"
#include "train/eval/validation.h"

namespace vdt {

SampleResult sample_clip(Denoiser& model, const SftDataset& ds, size_t index, const EulerConfig& cfg, uint64_t seed) {
  torch::NoGradGuard ng;
  model.eval();
  const auto device = model.device();
  const auto& table = *ds.text_table();
  auto branch = [&](const SftSample& s) -> VelocityFn {
    auto b = std::make_shared<SftBatch>(collate({s}, table));
    return [&model, b](const torch::Tensor& x, const torch::Tensor& t) {
      return model.forward(model_inputs(model, x, t, b->context, b->context_ids, b->ids)).to(torch::kFloat32);
    };
  };
  const auto cond = ds.get_with(index, false, false);
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

CausalSampleResult sample_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                        const EulerConfig& cfg, uint64_t seed, bool clean_first_frame) {
  torch::NoGradGuard ng;
  model.eval();
  const auto device = model.device();
  const auto w = ds.load(ds.val().at(index), ds.val_start(static_cast<int64_t>(index)));
  auto branch = [&](const std::vector<int64_t>& rows) -> VelocityFn {
    auto ctx = std::make_shared<std::pair<torch::Tensor, torch::Tensor>>();
    ds.text_of(rows, &ctx->first, &ctx->second);  // [R, Lt, text_dim], [1, span]
    return [&model, ctx, chunk_frames](const torch::Tensor& x, const torch::Tensor& t) {
      return model  // context_ids: the frames sampled so far
          .forward(model_inputs(model, x, t, ctx->first, ctx->second.narrow(1, 0, x.size(2)), {},
                                AttentionPattern::block_causal(chunk_frames)))
          .to(torch::kFloat32);
    };
  };
  const int64_t null_row = ds.text_table()->row_of(ds.info().null_prompt);
  auto x0 = w.latents.unsqueeze(0).to(device, torch::kFloat32);  // [1, C, span, H, W]
  const uint64_t key = fnv1a64(w.clip_id + "@" + std::to_string(w.start));
  auto gen = make_generator(torch::kCPU, RngStream(seed, rng_purpose::kCausalSample).u64(key, 0));
  auto noise = torch::randn(x0.sizes(), gen, torch::kFloat32).to(device);
  CausalSampleResult r;
  r.clip_id = w.clip_id, r.start = w.start;
  r.ground_truth = x0[0].cpu();
  r.sample = causal_euler_sample(branch(w.text_rows),
                                 cfg.cfg_scale != 1.0 ? branch(std::vector<int64_t>(w.text_rows.size(), null_row))
                                                      : VelocityFn(),
                                 noise, clean_first_frame ? x0.slice(2, 0, 1) : torch::Tensor(), chunk_frames, cfg)[0]
                 .cpu();
  return r;
}

}  // namespace vdt
