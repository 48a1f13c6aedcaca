// Wan DiT forward. The timestep path runs per timestep group (see block.h): sinusoid in float64 -> time_embedding
// -> e [B, G, D]; time_projection -> e0 [B, G, 6, D]. With G = F' this equals the reference's per-token tensors
// (tokens of one frame share a timestep) at 1/(H'W') of the cost.
#include "model/wan_dit.h"

#include <torch/torch.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/rng_purposes.h"

namespace vdt {

HeadImpl::HeadImpl(int64_t dim, int64_t out_features, double eps) : eps_(eps) {
  head = register_module("head", torch::nn::Linear(dim, out_features));
  modulation = register_parameter("modulation", torch::randn({1, 2, dim}) / std::sqrt(static_cast<double>(dim)));
}

torch::Tensor HeadImpl::forward(const torch::Tensor& x, const torch::Tensor& e) {
  // [1, 2, D] + [B, G, 1, D] -> 2 x [B, G, 1, D], in e's dtype (float32)
  auto mod = (modulation.to(e.scalar_type()) + e.unsqueeze(2)).chunk(2, 2);
  return head(modulated_norm(x, mod[0], mod[1], eps_));
}

WanDiTImpl::WanDiTImpl(const ModelConfig& cfg, torch::TensorOptions options) : cfg_(cfg) {
  cfg.validate();
  rope_cache_ = std::make_shared<RopeCache>(cfg.head_dim());
  const int64_t D = cfg.dim;
  auto place = [&](auto m) {
    if (options.has_device() || options.has_dtype()) m->to(options.device(), options.dtype().toScalarType());
    return m;
  };
  auto gelu_tanh = torch::nn::GELU(torch::nn::GELUOptions().approximate("tanh"));
  patch_embedding = register_module(
      "patch_embedding",
      place(torch::nn::Conv3d(torch::nn::Conv3dOptions(cfg.in_dim, D, {cfg.patch[0], cfg.patch[1], cfg.patch[2]})
                                  .stride({cfg.patch[0], cfg.patch[1], cfg.patch[2]}))));
  text_embedding = register_module("text_embedding", place(torch::nn::Sequential(torch::nn::Linear(cfg.text_dim, D),
                                                                                 gelu_tanh, torch::nn::Linear(D, D))));
  time_embedding = register_module(
      "time_embedding",
      place(torch::nn::Sequential(torch::nn::Linear(cfg.freq_dim, D), torch::nn::SiLU(), torch::nn::Linear(D, D))));
  time_projection =
      register_module("time_projection", place(torch::nn::Sequential(torch::nn::SiLU(), torch::nn::Linear(D, 6 * D))));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    blocks->push_back(place(WanBlock(D, cfg.ffn_dim, cfg.num_heads, cfg.eps)));
  head = register_module("head", place(Head(D, cfg.out_dim * cfg.patch_volume(), cfg.eps)));
}

std::array<int64_t, 3> WanDiTImpl::token_grid(at::IntArrayRef s) const {
  VDT_CHECK(s.size() == 5 && s[2] % cfg_.patch[0] == 0 && s[3] % cfg_.patch[1] == 0 && s[4] % cfg_.patch[2] == 0,
            "latents of shape ", s, " do not tile into patches ", cfg_.patch[0], "x", cfg_.patch[1], "x",
            cfg_.patch[2]);
  return {s[2] / cfg_.patch[0], s[3] / cfg_.patch[1], s[4] / cfg_.patch[2]};
}

void WanDiTImpl::set_causal_kernel(CausalKernel k) {
  for (auto& b : *blocks) b->as<WanBlockImpl>()->self_attn->causal_kernel = k;
}

void WanDiTImpl::set_fused_lora_qkv(bool on) {
  for (auto& b : *blocks) b->as<WanBlockImpl>()->self_attn->fuse_lora_qkv = on;
}

void WanDiTImpl::set_attention_kernel(AttentionKernel k) {
  for (auto& b : *blocks) b->as<WanBlockImpl>()->set_attention_kernel(k);
}

void WanDiTImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::globalContext().defaultGenerator(parameters().front().device()).clone();
  gen.set_current_seed(seed);
  auto xavier = [&](torch::Tensor w) {  // Xavier-uniform on the weight viewed as [out, in*k]
    const double fan_out = w.size(0), fan_in = w.numel() / w.size(0);
    const double a = std::sqrt(6.0 / (fan_in + fan_out));
    w.uniform_(-a, a, gen);
  };
  const auto params = named_parameters();
  for (auto& kv : params) {
    const std::string& name = kv.key();
    auto& p = kv.value();
    const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    if (name.rfind("gc_sem_cond.", 0) == 0) {
      // The adapter: PyTorch's default Conv3d / Linear init (kaiming-uniform a=sqrt(5), i.e. U(+-1/sqrt(fan_in)) for
      // weight and bias), as the Python trainer gets it, but from this seed; proj_out stays zero.
      if (name.rfind("gc_sem_cond.proj_out.", 0) == 0) {
        p.zero_();
      } else {
        const auto w = params[name.substr(0, name.rfind('.')) + ".weight"];
        const double bound = 1.0 / std::sqrt(static_cast<double>(w.numel() / w.size(0)));
        p.uniform_(-bound, bound, gen);
      }
    } else if (name.find("modulation") != std::string::npos) {
      p.normal_(0, 1.0 / std::sqrt(static_cast<double>(cfg_.dim)), gen);
    } else if (name.find("norm") != std::string::npos) {
      p.fill_(is_weight ? 1.0 : 0.0);
    } else if (!is_weight) {
      p.zero_();
    } else if (name == "head.head.weight") {
      p.zero_();
    } else if (name.rfind("text_embedding", 0) == 0 || name.rfind("time_embedding", 0) == 0) {
      p.normal_(0, 0.02, gen);
    } else {
      xavier(p);
    }
  }
}

torch::Tensor WanDiTImpl::unpatchify(const torch::Tensor& out, std::array<int64_t, 3> grid) const {
  const int64_t B = out.size(0), C = cfg_.out_dim;
  const auto [pt, ph, pw] = cfg_.patch;
  const auto [F, H, W] = grid;
  auto y = out.view({B, F, H, W, pt, ph, pw, C});  // [B, L, pt*ph*pw*C], channels fastest
  y = y.permute({0, 7, 1, 4, 2, 5, 3, 6});         // -> [B, C, F, pt, H, ph, W, pw]
  return y.reshape({B, C, F * pt, H * ph, W * pw});
}

void WanDiTImpl::install_sem_cond(const SemCondConfig& cfg) {
  VDT_CHECK(!has_sem_cond(), "gc_sem_cond is already installed");
  gc_sem_cond = register_module("gc_sem_cond", SemCond(cfg, cfg_.dim, cfg_.patch));
  gc_sem_cond->to(patch_embedding->weight.device(), patch_embedding->weight.scalar_type());
}

std::vector<torch::nn::Module*> WanDiTImpl::block_modules() {
  std::vector<torch::nn::Module*> out;
  for (auto& b : *blocks) out.push_back(b.get());
  return out;
}

void WanDiTImpl::init_random_base(uint64_t seed) {
  init_weights(seed);
  torch::NoGradGuard ng;
  auto gen = make_generator(torch::kCPU, RngStream(seed, rng_purpose::kRandomBaseHead).u64(~0ull, 1));
  auto& w = head->head->weight;
  w.copy_(torch::randn(w.sizes(), gen) * (1.0 / std::sqrt(static_cast<double>(w.size(1)))));
}

std::string WanDiTImpl::architecture_difference(const std::string& config_json) const {
  const auto other = ModelConfig::from_json(config_json, "the saved architecture");
  return cfg_.same_architecture(other) ? "" : "saved " + other.to_json() + ", this model " + cfg_.to_json();
}

double WanDiTImpl::train_flops(const WindowShape& window, bool frozen_base) const {
  return wan_train_flops(cfg_, window, frozen_base);
}

double wan_train_flops(const ModelConfig& cfg_, const WindowShape& w, bool frozen_base) {
  const double D = cfg_.dim, FF = cfg_.ffn_dim, Lt = static_cast<double>(w.text_len);
  const auto [pt, ph, pw] = cfg_.patch;
  const double frame_tokens = static_cast<double>((w.latent_h / ph) * (w.latent_w / pw));
  const double L1 = static_cast<double>(w.frames / pt) * frame_tokens;  // tokens of one copy of the span
  const double L = static_cast<double>(w.copies) * L1;
  double pairs = L * L;  // bidirectional
  if (w.chunk_frames > 0) {
    // Block-causal: chunk i's queries see chunks 0..i, c^2 (i + 1) pairs; under teacher forcing the clean copy the
    // same and each noisy chunk the clean chunks before it and itself, again c^2 (i + 1) (model/block_causal.h).
    const double n = static_cast<double>(w.frames / w.chunk_frames), c = L1 / n;
    pairs = static_cast<double>(w.copies) * c * c * n * (n + 1) / 2;
  }
  const double fwd = cfg_.num_layers * (L * (12 * D * D + 4 * Lt * D + 4 * D * FF) + 4 * pairs * D + 4 * Lt * D * D);
  return (frozen_base ? 2 : 3) * fwd;
}

std::pair<torch::Tensor, torch::Tensor> WanDiTImpl::time_embedding_rows(const torch::Tensor& t,
                                                                        const torch::Tensor& t_rows,
                                                                        const torch::Tensor& t_index,
                                                                        const torch::Device& device) {
  // Time, in float32 whatever the weights' dtype (the official Wan keeps this path in fp32; it is tiny):
  // t [B, G] -> e [B, G, D], e0 [B, G, 6, D]
  auto lin32 = [](const torch::nn::Module& m, const torch::Tensor& x) {
    const auto& l = *m.as<torch::nn::LinearImpl>();
    return torch::linear(x, l.weight.to(torch::kFloat32), l.bias.to(torch::kFloat32));
  };
  auto time_mlp = [&](const torch::Tensor& tt) {  // [...] -> e [..., D], e0 [..., 6, D]
    auto e = lin32(*time_embedding[2],
                   torch::silu(lin32(*time_embedding[0], sinusoidal_embedding(tt, cfg_.freq_dim, torch::kFloat32))));
    return std::make_pair(e, lin32(*time_projection[1], torch::silu(e)).unflatten(-1, {6, cfg_.dim}));
  };
  if (!t_rows.defined()) return time_mlp(t);  // the reference: one row per timestep group
  // The MLP on the U distinct timesteps only, then each group picks its row: [U, D] -> [B, G, D] (the per-token
  // broadcast happens inside modulated_norm / gated_add, which view x per group).
  TORCH_CHECK(t_rows.dim() == 1 && t_index.defined() && t_index.sizes() == t.sizes(),
              "WanDiT: expected "
              "t_rows [U] and t_index of t's shape ",
              t.sizes(), ", got ", t_rows.sizes(), " and ", t_index.defined() ? t_index.sizes() : at::IntArrayRef{});
  auto [eu, e0u] = time_mlp(t_rows.to(device));                                  // [U, D], [U, 6, D]
  const auto idx = t_index.to(device).flatten();                                 // [B*G]
  auto e = eu.index_select(0, idx).view({t.size(0), t.size(1), -1});             // -> [B, G, D]
  auto e0 = e0u.index_select(0, idx).view({t.size(0), t.size(1), 6, cfg_.dim});  // -> [B, G, 6, D]
  return {e, e0};
}

torch::Tensor WanDiTImpl::forward(const DenoiserInputs& in, DenoiserAux* aux) {
  TORCH_CHECK(in.x.dim() == 5 && in.x.size(1) == cfg_.in_dim, "WanDiT: expected x [B, ", cfg_.in_dim,
              ", F, H, W], got ", in.x.sizes());
  const auto grid = token_grid(in.x.sizes());
  const int64_t B = in.x.size(0), L = grid[0] * grid[1] * grid[2];
  const auto dtype = patch_embedding->weight.scalar_type();
  TORCH_CHECK(in.t.dim() == 1 || (in.t.dim() == 2 && (in.t.size(1) == grid[0] || in.t.size(1) == L)),
              "WanDiT: expected t [B], [B, F'=", grid[0], "] or [B, L=", L, "], got ", in.t.sizes());

  // Patch embedding: [B, C, F, H, W] -> [B, D, F', H', W'] -> [B, L, D], made row-major: left as the transpose's
  // view, the residual stream (every residual add follows its first operand's layout) and its gradients stay
  // column-major, and backward hands cuBLAS operands with leading dimension L, which for L % 8 != 0 (8190 tokens at
  // 480x832) falls back to 2-element-aligned kernels (~20 % of the 5B step under block checkpointing).
  auto x = patch_embedding(in.x.to(dtype)).flatten(2).transpose(1, 2).contiguous();
  if (aux) aux->x_rms = x.detach().to(torch::kFloat32).pow(2).mean().sqrt();
  if (has_sem_cond()) {
    TORCH_CHECK(in.sem_ids.defined(), "WanDiT: gc_sem_cond is installed but no sem_ids were given");
    TORCH_CHECK(in.sem_ids.dim() == 4 && in.sem_ids.size(0) == B && in.sem_ids.size(1) == in.x.size(2),
                "WanDiT: sem_ids must be [B, F, Hs, Ws] with B = ", B, " and F = ", in.x.size(2), ", got ",
                in.sem_ids.sizes());
    auto sem = gc_sem_cond(in.sem_ids);  // [B, L, D]
    TORCH_CHECK(sem.sizes() == x.sizes(), "WanDiT: gc_sem_cond output ", sem.sizes(), " does not match the token grid ",
                x.sizes(), "; is sem_scale right (ids must be latent size x sem_scale)?");
    if (aux) aux->sem_rms = sem.detach().to(torch::kFloat32).pow(2).mean().sqrt();
    x = x + sem;
  } else if (aux) {
    aux->sem_rms = torch::zeros({}, torch::kFloat32);
  }

  auto t = in.t.dim() == 1 ? in.t.unsqueeze(1) : in.t;
  auto [e, e0] = time_embedding_rows(t, distinct_time_rows_ ? in.t_rows : torch::Tensor(), in.t_index, x.device());

  // Text: [B, Lt, text_dim] -> [B, Lt, D]; per cell: rows [R, Lt, text_dim] -> [R, Lt, D] -> [B, F', Lt, D]
  torch::Tensor ctx_ids;
  auto ctx = text_embedding->forward(in.context.to(dtype));
  if (in.context_ids.defined()) {
    TORCH_CHECK(in.context_ids.dim() == 2 && in.context_ids.size(0) == B && in.context_ids.size(1) == grid[0],
                "WanDiT: context_ids must be [B, F'=", grid[0], "], got ", in.context_ids.sizes());
    ctx_ids = in.context_ids.to(torch::kLong);  // the blocks project k, v per distinct row, then pick per cell
  }

  BlockInputs bin{x, e0, ctx, {}};
  bin.ctx_ids = ctx_ids;
  const auto& pattern = in.attention;
  if (pattern.teacher_forcing) {  // [clean | noisy]: the span's positions twice
    TORCH_CHECK(pattern.chunk_frames > 0 && grid[0] % (2 * pattern.chunk_frames) == 0,
                "WanDiT: teacher forcing "
                "needs a chunk size and two equal halves of whole chunks, got ",
                grid[0], " token frames");
    bin.rope = rope_cache_->get(grid, x.device(), /*repeated=*/true);  // [L, Dh/2]: the halves share positions
    bin.pattern.teacher_forcing = true;
  } else {
    bin.rope = rope_cache_->get(grid, x.device());  // [L, Dh/2]
  }
  if (pattern.causal()) {
    TORCH_CHECK(grid[0] % pattern.chunk_frames == 0, "WanDiT: ", grid[0], " latent frames do not split into chunks of ",
                pattern.chunk_frames);
    bin.pattern.chunk_tokens = pattern.chunk_frames * grid[1] * grid[2];  // tokens per chunk
  }
  for (auto& m : *blocks) {
    auto& block = *m->as<WanBlockImpl>();
    if (!block_runner_) {
      bin.x = block.forward(bin);
      continue;
    }
    // The differentiable inputs x, e0, ctx; the rest of bin rides along in the closure, without them: a runner that
    // keeps the closure (checkpointing) must not keep this block's x alive through it (--act-offload moves it off).
    BlockInputs rest = bin;
    rest.x = rest.e0 = rest.ctx = torch::Tensor();
    bin.x = block_runner_({block, {bin.x, bin.e0, bin.ctx}, [&block, rest](const std::vector<torch::Tensor>& v) {
                             BlockInputs b = rest;
                             b.x = v[0], b.e0 = v[1], b.ctx = v[2];
                             return block.forward(b);
                           }});
  }
  return unpatchify(head(bin.x, e), grid);
}

}  // namespace vdt
