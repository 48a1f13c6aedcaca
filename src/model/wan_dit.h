// The Wan DiT (reference/wan_spec.md §3) under its checkpoint key names: patch embedding, text and time MLPs,
// time projection, N blocks, head with its 2-way modulation, unpatchify (channels fastest).
// Attachment points for later features, so the model stays free of training concerns:
//   * `cond_embed` is added to the patch embedding output; the semantic-map adapter `gc_sem_cond`, once installed,
//     adds its output there from `sem_ids`;
//   * `context_ids` selects per-cell text rows (each distinct row embedded once);
//   * a block runner wraps each block call (activation checkpointing, offload) from outside.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include <functional>

#include "model/block.h"
#include "model/config.h"
#include "model/sem_cond.h"

namespace vdt {

class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(int64_t dim, int64_t out_features, double eps);
  // x [B, L, D], e [B, G, D] (time embedding, no SiLU) -> [B, L, out_features]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e);
  torch::nn::Linear head{nullptr};
  torch::Tensor modulation;  // [1, 2, D]

 private:
  double eps_;
};
TORCH_MODULE(Head);

struct DiTInputs {
  torch::Tensor x;            // [B, C, F, H, W] noisy latents
  torch::Tensor t;            // [B] one timestep, [B, F'] per latent frame, or [B, L] per token (0..1000 scale)
  torch::Tensor context;      // [B, Lt, text_dim], or rows [R, Lt, text_dim] when context_ids is given
  torch::Tensor context_ids;  // optional [B, F'] row of `context` for each cell (latent frame)
  torch::Tensor cond_embed;   // optional [B, L, D] added after patch embedding
  torch::Tensor sem_ids;      // [B, F, Hs, Ws] uint8 part ids for gc_sem_cond (required once it is installed)
  int64_t causal_chunk_frames = 0;  // latent frames per block-causal chunk (self-attention); 0 = bidirectional
  // Teacher forcing (needs causal_chunk_frames): x holds [clean span | noisy span] along frames (2F frames); both
  // halves get the span's RoPE positions, and the attention mask is block_causal.h's teacher_forcing_mask.
  bool teacher_forcing = false;
};

// Diagnostics of one forward, filled when asked for: RMS of the adapter output and of the patch embedding.
struct DiTAux {
  torch::Tensor sem_rms, x_rms;  // 0-dim float32, detached
};

using BlockRunner = std::function<torch::Tensor(WanBlockImpl&, const BlockInputs&)>;

class WanDiTImpl : public torch::nn::Module {
 public:
  // Builds on `options` (device, dtype) block by block, so a 5B model never sits whole in host memory.
  explicit WanDiTImpl(const ModelConfig& cfg, torch::TensorOptions options = {});
  torch::Tensor forward(const DiTInputs& in, DiTAux* aux = nullptr);  // -> [B, out_dim, F, H, W]

  // Adds the zero-initialised semantic-map adapter as submodule `gc_sem_cond` (on this model's device and dtype).
  void install_sem_cond(const SemCondConfig& cfg);
  bool has_sem_cond() const { return !gc_sem_cond.is_empty(); }

  // Token grid (F', H', W') for a latent of shape [B, C, F, H, W].
  std::array<int64_t, 3> token_grid(at::IntArrayRef latent_shape) const;
  // Re-initialises every parameter as the reference does for training from scratch (wan_spec §3.10).
  void init_weights(uint64_t seed);
  void set_block_runner(BlockRunner runner) { block_runner_ = std::move(runner); }
  void set_attention_kernel(AttentionKernel k);
  void set_causal_kernel(CausalKernel k);  // prefix (default) or mask, for causal_chunk_frames > 0
  const ModelConfig& config() const { return cfg_; }

  torch::nn::Conv3d patch_embedding{nullptr};
  torch::nn::Sequential text_embedding{nullptr}, time_embedding{nullptr}, time_projection{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  Head head{nullptr};
  SemCond gc_sem_cond{nullptr};

 private:
  torch::Tensor unpatchify(const torch::Tensor& out, std::array<int64_t, 3> grid) const;
  ModelConfig cfg_;
  BlockRunner block_runner_;
};
TORCH_MODULE(WanDiT);

}  // namespace vdt
