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

CausalSampleResult sample_causal_window(WanDiTImpl& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                        const EulerConfig& cfg, uint64_t seed, bool clean_first_frame) {
  torch::NoGradGuard ng;
  model.eval();
  const auto device = model.patch_embedding->weight.device();
  const auto dtype = model.patch_embedding->weight.scalar_type();
  const auto w = ds.load(ds.val().at(index), ds.val_start(static_cast<int64_t>(index)));
  auto branch = [&](const std::vector<int64_t>& rows) -> VelocityFn {
    auto ctx = std::make_shared<std::pair<torch::Tensor, torch::Tensor>>();
    ds.text_of(rows, &ctx->first, &ctx->second);  // [R, Lt, text_dim], [1, span]
    return [&model, ctx, device, dtype, chunk_frames](const torch::Tensor& x, const torch::Tensor& t) {
      DiTInputs in;
      in.x = x.to(device, dtype);
      in.t = t.to(device);
      in.context = ctx->first.to(device, dtype);
      in.context_ids = ctx->second.narrow(1, 0, x.size(2)).to(device);  // the frames sampled so far
      in.causal_chunk_frames = chunk_frames;
      return model.forward(in).to(torch::kFloat32);
    };
  };
  const int64_t null_row = ds.text_table()->row_of(ds.info().null_prompt);
  auto x0 = w.latents.unsqueeze(0).to(device, torch::kFloat32);  // [1, C, span, H, W]
  const uint64_t key = fnv1a64(w.clip_id + "@" + std::to_string(w.start));
  auto gen = make_generator(torch::kCPU, RngStream(seed, 0x63736d70 /* "csmp" */).u64(key, 0));
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
