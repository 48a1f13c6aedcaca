// The Wan DiT (docs/design.md §1) under its checkpoint key names: patch embedding, text and time MLPs,
// time projection, N blocks, head with its 2-way modulation, unpatchify (channels fastest).
// The first implementation of the base-model seam (model/denoiser.h). Attachment points, so the model stays free of
// training concerns:
//   * the semantic-map adapter `gc_sem_cond`, once installed, adds its output to the patch embedding from `sem_ids`;
//   * `context_ids` selects per-cell text rows (each distinct row embedded once);
//   * a block runner wraps each block call (activation checkpointing, offload, sharded weights) from outside.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include <functional>
#include <memory>

#include "model/block.h"
#include "model/config.h"
#include "model/denoiser.h"
#include "model/embeddings.h"
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

class WanDiTImpl : public Denoiser {
 public:
  // Builds on `options` (device, dtype) block by block, so a 5B model never sits whole in host memory.
  explicit WanDiTImpl(const ModelConfig& cfg, torch::TensorOptions options = {});
  torch::Tensor forward(const DenoiserInputs& in, DenoiserAux* aux = nullptr) override;  // -> [B, out_dim, F, H, W]

  // Adds the zero-initialised semantic-map adapter as submodule `gc_sem_cond` (on this model's device and dtype).
  void install_sem_cond(const SemCondConfig& cfg) override;
  bool has_sem_cond() const override { return !gc_sem_cond.is_empty(); }

  // Token grid (F', H', W') for a latent of shape [B, C, F, H, W].
  std::array<int64_t, 3> token_grid(at::IntArrayRef latent_shape) const;
  // Re-initialises every parameter as the reference does for training from scratch (docs/design.md §1).
  void init_weights(uint64_t seed) override;
  // init_weights plus a random head (Wan's zero head would pass no gradient to a LoRA on the blocks).
  void init_random_base(uint64_t seed) override;
  void set_block_runner(BlockRunner runner) override { block_runner_ = std::move(runner); }
  BlockRunner block_runner() const override { return block_runner_; }
  void set_attention_kernel(AttentionKernel k);
  // With t_rows / t_index given (DenoiserInputs), the time MLP and projection run on the distinct timesteps only
  // (default); off: one row per timestep group, the reference the shortcut is tested against.
  void set_distinct_time_rows(bool on) { distinct_time_rows_ = on; }
  // Self-attention's LoRA A factors of q, k, v as one GEMM (default) or three (the reference).
  void set_fused_lora_qkv(bool on);
  void set_causal_kernel(CausalKernel k) override;
  const ModelConfig& config() const { return cfg_; }
  // The time MLP in float32: t [B, G] (0..1000) -> e [B, G, D], e0 [B, G, 6, D]; on t's distinct values t_rows [U]
  // with t_index [B, G] when given (undefined: one row per group, the reference).
  std::pair<torch::Tensor, torch::Tensor> time_embedding_rows(const torch::Tensor& t, const torch::Tensor& t_rows,
                                                              const torch::Tensor& t_index,
                                                              const torch::Device& device);
  // Patch tokens [B, L, pt*ph*pw*C] of token grid (F', H', W') -> [B, C, F, H, W].
  torch::Tensor unpatchify(const torch::Tensor& out, std::array<int64_t, 3> grid) const;
  // A stream of chunks with a KV cache (model/kv_stream.h, model/wan_stream.cpp).
  std::unique_ptr<KvStream> open_stream(const StreamSpec& spec) override;

  std::vector<torch::nn::Module*> block_modules() override;
  std::vector<std::string> lora_targets() const override { return {"q", "k", "v", "o", "ffn.0", "ffn.2"}; }
  std::string family() const override { return "wan"; }
  std::string preset() const override { return cfg_.preset; }
  std::string config_json() const override { return cfg_.to_json(); }
  LoraBaseInfo lora_base_info() const override { return {cfg_.preset, "cross-attention per frame"}; }
  int64_t first_pixel_frame(int64_t k) const override { return k == 0 ? 0 : 4 * k - 3; }
  std::string architecture_difference(const std::string& config_json) const override;
  int64_t latent_channels() const override { return cfg_.in_dim; }
  int64_t text_dim() const override { return cfg_.text_dim; }
  int64_t width() const override { return cfg_.dim; }
  torch::Device device() const override { return patch_embedding->weight.device(); }
  torch::ScalarType compute_dtype() const override { return patch_embedding->weight.scalar_type(); }
  double train_flops(const WindowShape& window, bool frozen_base) const override;

  torch::nn::Conv3d patch_embedding{nullptr};
  torch::nn::Sequential text_embedding{nullptr}, time_embedding{nullptr}, time_projection{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  Head head{nullptr};
  SemCond gc_sem_cond{nullptr};

 private:
  ModelConfig cfg_;
  BlockRunner block_runner_;
  bool distinct_time_rows_ = true;
  std::shared_ptr<RopeCache> rope_cache_;  // the RoPE tables of the grids seen, on their device
};
TORCH_MODULE(WanDiT);

// Model FLOPs of one training step of a Wan DiT on one window (Denoiser::train_flops), docs/BENCHMARKS.md's count: per
// layer and token 12·D² (self-attention q, k, v, o; cross-attention q, o) + 4·Lt·D (cross-attention) + 4·D·FF (FFN),
// 4·D per attended query/key pair, and 4·Lt·D² per window (cross-attention k, v on the text).
double wan_train_flops(const ModelConfig& cfg, const WindowShape& window, bool frozen_base);

}  // namespace vdt
