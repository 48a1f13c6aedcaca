// H3 DiT forward, as DiffSynth's MiniMaxH3DiT (_embed + forward): rows are embedded by their modality's
// projection and scattered into a zero [S, D] sequence (padding rows stay zero but still run through every block in
// their own attention segment), text goes condition_proj -> token refiner first, then every block sees all rows.
// The fp32 islands run their input cast to their own dtype and hand back the compute dtype (docs/h3_model.md §1.10).
#include "model/h3/h3_dit.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <optional>

#include "core/error.h"
#include "model/h3/h3_causal.h"

namespace vdt {
namespace {

// Moves every parameter and buffer of `m` (named under `prefix` in the checkpoint) to `device`, in `dtype`, or in
// float32 for the fp32 islands when `islands` is set.
void place(torch::nn::Module& m, const std::string& prefix, torch::Device device, torch::ScalarType dtype,
           bool islands) {
  torch::NoGradGuard ng;
  auto move = [&](const std::string& name, torch::Tensor& t) {
    const auto want = islands && H3DiTImpl::is_fp32_island(prefix + name) ? torch::kFloat32 : dtype;
    if (t.device() != device || t.scalar_type() != want) t.set_data(t.to(device, want));
  };
  for (auto& kv : m.named_parameters()) move(kv.key(), kv.value());
  for (auto& kv : m.named_buffers()) move(kv.key(), kv.value());
}

}  // namespace

std::vector<int64_t> h3_segment_bounds(const torch::Tensor& cu_seqlens, int64_t total, const char* what) {
  TORCH_CHECK(cu_seqlens.defined() && cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2, "H3DiT: ", what,
              " must be [K+1] segment bounds, got ", cu_seqlens.defined() ? cu_seqlens.sizes() : at::IntArrayRef{});
  auto host = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<int64_t> b(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  TORCH_CHECK(b.front() == 0 && b.back() == total, "H3DiT: ", what, " must run from 0 to ", total, ", got ",
              cu_seqlens.to(torch::kCPU));
  for (size_t i = 1; i < b.size(); ++i)
    TORCH_CHECK(b[i] >= b[i - 1], "H3DiT: ", what, " must not decrease, got ", cu_seqlens.to(torch::kCPU));
  return b;
}

H3TimeEmbedderImpl::H3TimeEmbedderImpl(int64_t freq_dim, int64_t hidden, int64_t out) : freq_dim_(freq_dim) {
  proj_in = register_module("proj_in", h3_linear(freq_dim, hidden));
  proj_out = register_module("proj_out", h3_linear(hidden, out));
}

torch::Tensor H3TimeEmbedderImpl::forward(const torch::Tensor& t) {
  const int64_t half = freq_dim_ / 2;
  // float32 throughout, as MiniMaxH3TimeEmbedder: exp(-ln(1e4) * i / half), features [cos | sin]
  auto freqs = torch::exp(torch::arange(half, t.options().dtype(torch::kFloat32)) * (-std::log(10000.0)) /
                          static_cast<double>(half));                               // [half]
  auto args = t.to(torch::kFloat32).unsqueeze(1) * freqs.unsqueeze(0);              // [M, half]
  auto t_freq = torch::cat({args.cos(), args.sin()}, -1);                           // [M, freq_dim]
  return proj_out(torch::silu(proj_in(t_freq.to(proj_in->weight.scalar_type()))));  // [M, out]
}

H3RopeImpl::H3RopeImpl(int64_t rope_len) {
  auto steps = torch::arange(rope_len, torch::kFloat32);
  inv_freq = register_buffer("inv_freq", torch::pow(10000.0, steps / static_cast<double>(rope_len)).reciprocal());
}

H3TokenRefinerImpl::H3TokenRefinerImpl(const H3Config& c) {
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.refiner_layers; ++i)
    blocks->push_back(H3RefinerBlock(c.hidden, c.heads, c.head_dim, c.ffn, c.norm_eps, c.qk_norm_eps));
  final_norm = register_module("final_norm", RMSNorm(c.hidden, c.final_norm_eps));
}

torch::Tensor H3TokenRefinerImpl::forward(const torch::Tensor& x, const std::vector<int64_t>& bounds) {
  auto h = x;
  const auto attend = H3AttentionLayout::segments(bounds, x.size(0));
  for (auto& b : *blocks) h = b->as<H3RefinerBlockImpl>()->forward(h, attend);
  return final_norm(h);
}

H3FinalLayerImpl::H3FinalLayerImpl(const H3Config& c) {
  norm = register_module("norm", RMSNorm(c.hidden, c.final_norm_eps));
  adaln_proj = register_module("adaln_proj", H3AdaLN(c.hidden, c.time_dim, /*chunks=*/2, /*modalities=*/1));
  video_out = register_module("video_out", h3_linear(c.hidden, c.video_dim()));
  audio_out = register_module("audio_out", h3_linear(c.hidden, c.audio_channels));
}

std::pair<torch::Tensor, torch::Tensor> H3FinalLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& t_emb,
                                                                  const torch::Tensor& inverse) {
  auto mod = adaln_proj(t_emb);                            // shift, scale: 2 x [M, D], indexed by timestep only
  auto h = h3_modulate(norm(x), mod[0], mod[1], inverse);  // [S, D]
  // Both heads see every row; the caller selects rows.
  return {video_out(h.to(video_out->weight.scalar_type())), audio_out(h.to(audio_out->weight.scalar_type()))};
}

bool H3DiTImpl::is_fp32_island(const std::string& name) {
  for (const char* p : {"video_patch_proj.", "audio_patch_proj.", "time_embedder.", "rope.", "final_layer.video_out.",
                        "final_layer.audio_out."})
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

H3DiTImpl::H3DiTImpl(const H3Config& cfg, const H3BuildOptions& opts) : cfg_(cfg) {
  cfg.validate();
  std::optional<H3FastBuild> fast;
  if (!opts.init) fast.emplace(opts.device, opts.dtype);
  const auto& c = cfg;
  auto add = [&](const std::string& name, auto m) {
    place(*m, name + ".", opts.device, opts.dtype, opts.fp32_islands);
    return register_module(name, m);
  };
  video_patch_proj = add("video_patch_proj", h3_linear(c.video_dim(), c.hidden));
  audio_patch_proj = add("audio_patch_proj", h3_linear(c.audio_channels, c.hidden));
  condition_proj = add("condition_proj", h3_linear(c.text_dim, c.hidden));
  time_embedder = add("time_embedder", H3TimeEmbedder(c.time_freq_dim, c.time_hidden, c.time_dim));
  rope = add("rope", H3Rope(c.rope_len));
  token_refiner = add("token_refiner", H3TokenRefiner(c));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    H3Block b(c.hidden, c.heads, c.head_dim, c.ffn, c.time_dim, c.norm_eps, c.qk_norm_eps);
    place(*b, "blocks." + std::to_string(i) + ".", opts.device, opts.dtype, opts.fp32_islands);
    blocks->push_back(b);
  }
  final_layer = add("final_layer", H3FinalLayer(c));
}

void H3DiTImpl::set_precision(torch::ScalarType dtype, bool fp32_islands) {
  place(*this, "", condition_proj->weight.device(), dtype, fp32_islands);
}

void H3DiTImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::globalContext().defaultGenerator(device()).clone();
  gen.set_current_seed(seed);
  const auto params = named_parameters();
  for (const auto& kv : params) {
    const std::string& name = kv.key();
    auto p = kv.value();
    if (p.dim() == 1 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0) {  // RMSNorm
      p.fill_(1.0);
      continue;
    }
    const auto w = params[name.substr(0, name.rfind('.')) + ".weight"];
    const double bound = 1.0 / std::sqrt(static_cast<double>(w.size(1)));  // fan_in of the Linear
    p.uniform_(-bound, bound, gen);
  }
  rope->inv_freq.copy_(
      torch::pow(10000.0, torch::arange(cfg_.rope_len, torch::kFloat32) / static_cast<double>(cfg_.rope_len))
          .reciprocal());
}

std::vector<torch::nn::Module*> H3DiTImpl::block_modules() {
  std::vector<torch::nn::Module*> out;
  for (auto& b : *blocks) out.push_back(b.get());
  return out;
}

std::string H3DiTImpl::architecture_difference(const std::string& config_json) const {
  const auto other = H3Config::from_json(config_json, "the saved architecture");
  return cfg_.same_architecture(other) ? "" : "saved " + other.to_json() + ", this model " + cfg_.to_json();
}

std::vector<int64_t> H3DiTImpl::side_stream_chunks(const std::string& stream, int64_t frames,
                                                   int64_t chunk_frames) const {
  VDT_CHECK(stream == "audio", "the h3 base has no side stream '", stream, "' (it has: audio)");
  return h3_audio_chunk_bounds(frames, chunk_frames);
}

int64_t H3DiTImpl::first_pixel_frame(int64_t k) const { return h3_first_pixel_frame(k); }

std::vector<int64_t> H3DiTImpl::side_stream_step_shape(const std::string& stream) const {
  VDT_CHECK(stream == "audio", "the h3 base has no side stream '", stream, "' (it has: audio)");
  return {2, cfg_.audio_channels};  // two channels of Da each: h3_pack_audio's [2, Da, A]
}

int64_t H3DiTImpl::extra_rows(int64_t frames, int64_t latent_h, int64_t latent_w, int64_t chunk_frames) const {
  return (latent_h / 2) * (latent_w / 2) + 2 * side_stream_chunks("audio", frames, chunk_frames).back();
}

std::string H3DiTImpl::describe_sequence(const WindowShape& w) const {
  const int64_t video = w.copies * w.frames * (w.latent_h / 2) * (w.latent_w / 2);
  const int64_t audio = w.copies * 2 * side_stream_chunks("audio", w.frames, w.chunk_frames).back();
  const int64_t rows = w.text_len + w.cond_rows + video + audio;
  char line[512];
  std::snprintf(line, sizeof(line),
                "rows per window: text %lld + Picture 1 (%s) %lld + video %lld + audio %lld = %lld "
                "(%lld with padding to 64); text and Picture 1 are the prefix every chunk sees (text handling: "
                "docs/h3_model.md §4.2 (a))",
                static_cast<long long>(w.text_len), w.cond_variant.c_str(), static_cast<long long>(w.cond_rows),
                static_cast<long long>(video), static_cast<long long>(audio), static_cast<long long>(rows),
                static_cast<long long>((rows + 63) / 64 * 64));
  return line;
}

double H3DiTImpl::train_flops(const WindowShape& window, bool frozen_base) const {
  return h3_train_flops(cfg_, window, frozen_base);
}

double h3_train_flops(const H3Config& c, const WindowShape& w, bool frozen_base) {
  const double D = c.hidden, I = c.inner(), F = c.ffn;
  const double weights = D * 3 * I + I * D + D * 2 * F + F * D;                 // qkv, out, fc1, fc2 of one block
  const int64_t chunk_frames = w.chunk_frames > 0 ? w.chunk_frames : w.frames;  // bidirectional: one chunk
  const int64_t frame_rows = (w.latent_h / 2) * (w.latent_w / 2);
  const auto audio = h3_audio_chunk_bounds(w.frames, chunk_frames);  // audio steps of each chunk, two rows a step
  const double prefix = static_cast<double>(w.text_len + w.cond_rows);
  double S = prefix, pairs = prefix * prefix, seen = prefix;
  for (size_t i = 0; i + 1 < audio.size(); ++i) {
    const double chunk = static_cast<double>(chunk_frames * frame_rows + 2 * (audio[i + 1] - audio[i]));
    seen += chunk;
    S += w.copies * chunk;
    pairs += w.copies * chunk * seen;  // a clean or noisy copy of chunk i sees the prefix and chunks' rows up to i
  }
  if (w.chunk_frames == 0) pairs = S * S;  // every row sees every row
  auto stack = [&](double rows, double attended, int64_t layers) {
    return layers * (2 * rows * weights + 4 * attended * I);
  };
  const double Lt = static_cast<double>(w.text_len);
  return (frozen_base ? 2.0 : 3.0) * (stack(S, pairs, c.num_layers) + stack(Lt, Lt * Lt, c.refiner_layers));
}

void H3DiTImpl::set_attention_kernel(AttentionKernel k) {
  for (auto& b : *blocks) b->as<H3BlockImpl>()->attn->kernel = k;
  for (auto& b : *token_refiner->blocks) b->as<H3RefinerBlockImpl>()->attn->kernel = k;
}

H3Outputs H3DiTImpl::forward(const H3Inputs& in) {
  const auto& c = cfg_;
  TORCH_CHECK(in.x.dim() == 3 && in.x.size(0) == 1 && in.x.size(2) == c.video_dim(), "H3DiT: expected x [1, S, ",
              c.video_dim(), "], got ", in.x.sizes());
  const int64_t S = in.x.size(1);
  TORCH_CHECK(in.audio_x.dim() == 3 && in.audio_x.size(0) == 1 && in.audio_x.size(1) == S &&
                  in.audio_x.size(2) == c.audio_channels,
              "H3DiT: expected audio_x [1, S=", S, ", ", c.audio_channels, "], got ", in.audio_x.sizes());
  TORCH_CHECK(in.position_ids.dim() == 3 && in.position_ids.size(0) == 1 && in.position_ids.size(1) == S &&
                  in.position_ids.size(2) == 3,
              "H3DiT: expected position_ids [1, S=", S, ", 3], got ", in.position_ids.sizes());
  TORCH_CHECK(in.token_tags.numel() == S && in.inverse_indices.numel() == S, "H3DiT: expected token_tags and ",
              "inverse_indices of S = ", S, " rows, got ", in.token_tags.sizes(), " and ", in.inverse_indices.sizes());
  TORCH_CHECK(in.unique_timesteps.dim() == 1 && in.unique_timesteps.size(0) >= 1, "H3DiT: expected unique_timesteps ",
              "[M], got ", in.unique_timesteps.sizes());
  TORCH_CHECK(in.prompt_embeds.dim() == 2 && in.prompt_embeds.size(1) == c.text_dim, "H3DiT: expected prompt_embeds ",
              "[Lt, ", c.text_dim, "], got ", in.prompt_embeds.sizes());
  const int64_t Lt = in.prompt_embeds.size(0);
  TORCH_CHECK(in.text_pos.numel() <= Lt, "H3DiT: ", in.text_pos.numel(), " text rows but only ", Lt,
              " prompt embeddings");

  const auto device = condition_proj->weight.device();
  const auto dtype = compute_dtype();
  auto idx = [&](const torch::Tensor& t) { return t.reshape({-1}).to(device, torch::kLong); };
  const auto img_pos = idx(in.img_pos), audio_pos = idx(in.audio_pos), text_pos = idx(in.text_pos);
  const auto out_pos = in.out_pos.defined() ? idx(in.out_pos) : img_pos;
  const auto inverse = idx(in.inverse_indices);
  const auto bounds = h3_segment_bounds(in.cu_seqlens, S, "cu_seqlens");
  const auto refiner_bounds = h3_segment_bounds(in.refiner_cu_seqlens, Lt, "refiner_cu_seqlens");

  // 1) embed: each modality's rows through its projection, scattered into zeros [S, D]
  auto island = [&](torch::nn::Linear& l, const torch::Tensor& x) {
    return l(x.to(device, l->weight.scalar_type())).to(dtype);
  };
  auto video = island(video_patch_proj, in.x[0].index_select(0, img_pos.to(in.x.device())));          // [Nv, D]
  auto audio = island(audio_patch_proj, in.audio_x[0].index_select(0, audio_pos.to(in.x.device())));  // [Na, D]
  auto text = token_refiner(condition_proj(in.prompt_embeds.to(device, dtype)), refiner_bounds);      // [Lt, D]
  auto h = torch::zeros({S, c.hidden}, torch::TensorOptions().device(device).dtype(dtype))
               .index_add(0, text_pos, text.narrow(0, 0, text_pos.size(0)))
               .index_add(0, img_pos, video)
               .index_add(0, audio_pos, audio);

  // 2) time: one embedding per unique timestep; each token's AdaLN row is inverse * 3 + max(tag, 0)
  auto t_emb = time_embedder(in.unique_timesteps.to(device));  // [M, time_dim]
  H3BlockInputs bin;
  bin.t_emb = t_emb;
  bin.ada_rows = inverse * 3 + idx(in.token_tags).clamp_min(0);
  bin.rope = h3_rope_table(in.position_ids[0].to(device), c.rope_len);  // float64 -> float32 angles
  bin.attend = in.attend.blocks.empty() ? H3AttentionLayout::segments(bounds, S) : in.attend;
  if (causal_kernel_ == CausalKernel::mask && !bin.attend.segments_only() && !bin.attend.mask.defined())
    bin.attend.mask = bin.attend.dense_mask(S, device);  // one masked call per block instead of one per chunk

  // 3) blocks; a runner from outside (checkpointing, sharding) gets x and t_emb as the differentiable inputs
  bin.x = h;
  for (auto& m : *blocks) {
    auto& block = *m->as<H3BlockImpl>();
    if (!block_runner_) {
      bin.x = block.forward(bin);
      continue;
    }
    H3BlockInputs rest = bin;  // without the differentiable inputs (as WanDiT: a kept closure must not keep x alive)
    rest.x = rest.t_emb = torch::Tensor();
    bin.x = block_runner_({block, {bin.x, bin.t_emb}, [&block, rest](const std::vector<torch::Tensor>& v) {
                             H3BlockInputs b = rest;
                             b.x = v[0], b.t_emb = v[1];
                             return block.forward(b);
                           }});
  }

  // 4) heads on every row, then the video rows (out_pos) and audio rows
  auto [video_all, audio_all] = final_layer(bin.x, t_emb, inverse);
  return {video_all.index_select(0, out_pos), audio_all.index_select(0, audio_pos)};
}

}  // namespace vdt
