// A window as a request: the same draws as the causal trainer's sampling always made (video 0, conditioning 1, side
// streams 2.., past the span their own counters), so results of earlier versions reproduce.
#include "generate/window.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/error.h"
#include "core/fnv1a.h"
#include "core/rng.h"
#include "core/rng_purposes.h"

namespace vdt {
namespace {

// Noise of chunks past the window's span: stream index kPastSpan + chunk (0, 1 and 2.. are the span's video,
// conditioning and side streams).
constexpr uint64_t kPastSpan = 1u << 20;

}  // namespace

WindowRequest window_request(const Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                             uint64_t seed, bool clean_first_frame, const std::string* prompt) {
  const auto device = model.device();
  const auto w = ds.load(ds.val().at(index), ds.val_start(static_cast<int64_t>(index)));
  const int64_t span = w.latents.size(1), cf = chunk_frames;
  VDT_CHECK(cf >= 1 && span % cf == 0, "a window of ", span, " latent frames does not split into chunks of ", cf);
  const uint64_t key = fnv1a64(w.clip_id + "@" + std::to_string(w.start));
  const RngStream rs(seed, rng_purpose::kCausalSample);
  auto randn = [device, rs, key](at::IntArrayRef shape, uint64_t i) {
    auto gen = make_generator(torch::kCPU, rs.u64(key, i));
    return torch::randn(shape, gen, torch::kFloat32).to(device);
  };
  WindowRequest out;
  out.clip_id = w.clip_id, out.start = w.start;
  const auto x0 = w.latents.unsqueeze(0).to(device, torch::kFloat32);  // [1, C, span, H, W]
  out.ground_truth = x0[0].cpu();
  auto& q = out.request;
  auto& c = q.conditions;
  q.height = x0.size(3), q.width = x0.size(4), q.chunk_frames = cf, q.chunks = span / cf, q.seed = seed;
  // The text: the conditioned rows per frame, then the null prompt's, as one set of distinct rows.
  auto rows = prompt ? std::vector<int64_t>(w.text_rows.size(), ds.text_table()->row_of(*prompt)) : w.text_rows;
  rows.push_back(ds.text_table()->row_of(ds.info().null_prompt));
  torch::Tensor ids;
  ds.text_of(rows, &c.text, &ids, &c.text_tags);  // [R, Lt, text_dim], [1, span + 1], [R, Lt] or undefined
  const auto host = ids[0].to(torch::kLong).contiguous();
  c.frame_rows.assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + span);
  c.null_row = host.data_ptr<int64_t>()[span];
  for (const auto& [name, latent] : w.cond) {
    c.cond[name] = latent.to(torch::kFloat32);                   // [C, 1, Hp, Wp]
    c.cond_noise[name] = randn(latent.unsqueeze(0).sizes(), 1);  // [1, C, 1, Hp, Wp]
  }
  if (clean_first_frame) c.first_frame = x0[0].slice(1, 0, 1);  // [C, 1, H, W]
  // The draws: the span's video and side streams (2..), then past the span per chunk.
  const auto span_noise = randn(x0.sizes(), 0);
  std::map<std::string, torch::Tensor> side_noise;
  uint64_t stream_i = 2;
  for (const auto& name : model.side_streams()) {
    auto it = w.streams.find(name);
    if (it == w.streams.end()) continue;                                 // the root has none: the base runs without it
    const auto s = it->second.unsqueeze(0).to(device, torch::kFloat32);  // [1, ..., A]
    out.side_ground_truth[name] = s[0].cpu();
    side_noise[name] = randn(s.sizes(), stream_i++);
  }
  q.side_streams = !side_noise.empty();
  const auto shape = x0.sizes().vec();
  const Denoiser* m = &model;
  out.hooks.noise = [span_noise, side_noise, randn, shape, span, cf, m](int64_t n) {
    SampleState s;
    s.video = n * cf < span ? span_noise.narrow(2, n * cf, cf)
                            : randn({1, shape[1], cf, shape[3], shape[4]}, kPastSpan + static_cast<uint64_t>(n));
    for (const auto& [name, sn] : side_noise) {
      const auto b = m->side_stream_chunks(name, (n + 1) * cf, cf);  // chunk n's steps [b[n], b[n + 1])
      const int64_t j0 = b[static_cast<size_t>(n)], j1 = b[static_cast<size_t>(n + 1)];
      auto step_shape = sn.sizes().vec();
      step_shape.back() = j1 - j0;
      s.side[name] = j1 <= sn.size(-1) ? sn.narrow(-1, j0, j1 - j0)
                                       : randn(step_shape, (kPastSpan << 1) + static_cast<uint64_t>(n));
    }
    return s;
  };
  return out;
}

StreamResult generate_window(Denoiser& model, WindowRequest w,
                             const std::function<void(const StreamChunk&)>& on_chunk) {
  w.hooks.on_chunk = on_chunk;
  auto r = generate_stream(model, w.request, w.hooks);
  r.clip_id = w.clip_id, r.start = w.start;
  r.ground_truth = w.ground_truth;
  r.side_ground_truth = w.side_ground_truth;
  return r;
}

StreamResult stream_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                  const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                  const StreamOptions& opts, const std::function<void(const StreamChunk&)>& on_chunk,
                                  const std::string* prompt) {
  auto w = window_request(model, ds, index, chunk_frames, seed, clean_first_frame, prompt);
  auto& q = w.request;
  q.euler = cfg;
  if (opts.chunks > 0) q.chunks = opts.chunks;
  q.window = opts.window, q.sink_chunks = opts.sink_chunks, q.span_chunks = opts.span_chunks;
  q.kernel = opts.kernel, q.graphs = opts.graphs, q.modulation_slots = opts.modulation_slots;
  return generate_window(model, std::move(w), on_chunk);
}

StreamResult sample_causal_window(Denoiser& model, const CausalDataset& ds, size_t index, int64_t chunk_frames,
                                  const EulerConfig& cfg, uint64_t seed, bool clean_first_frame,
                                  const std::string* prompt) {
  auto w = window_request(model, ds, index, chunk_frames, seed, clean_first_frame, prompt);
  w.request.euler = cfg;
  w.request.cache = false;
  w.request.span_chunks = w.request.chunks;
  return generate_window(model, std::move(w));
}

}  // namespace vdt
