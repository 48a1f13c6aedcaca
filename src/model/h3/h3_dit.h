// The MiniMax-H3 DiT (h3_spec §1.3) under its checkpoint key names: input projections (`video_patch_proj`,
// `audio_patch_proj`, `condition_proj`), `time_embedder`, `rope` (its stored inv_freq is loaded, never read),
// `token_refiner`, `blocks` (H3Block) and `final_layer`. forward takes one packed sequence (h3_packer builds it)
// and returns the raw head outputs at the video and audio rows (≈ x0 − ε: negate for the flow-matching target).
// Precision: built in float32, or in bf16 with the release checkpoint's fp32 islands (§1.10).
// Not here: packing, patchify, losses, checkpointing or sharding (a block runner wraps blocks from outside).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <functional>

#include "model/h3/h3_block.h"
#include "model/h3/h3_config.h"

namespace vdt {

// The arguments of the reference MiniMaxH3DiT.forward, one packed sequence of S rows.
struct H3Inputs {
  torch::Tensor x;                  // [1, S, Dv] video rows: conditioning and target video at img_pos, 0 elsewhere
  torch::Tensor audio_x;            // [1, S, Da] audio rows at audio_pos, 0 elsewhere
  torch::Tensor position_ids;       // [1, S, 3] (t, h, w), float64 as built; cast to float32 for RoPE
  torch::Tensor token_tags;         // [S] int64: 0 video, 1 text, 2 audio, -1 padding (clamped to 0)
  torch::Tensor unique_timesteps;   // [M] float32 model time in [0, 1] (1 = clean), sorted
  torch::Tensor inverse_indices;    // [S] int64: each row's index into unique_timesteps
  torch::Tensor prompt_embeds;      // [Lt, text_dim]
  torch::Tensor img_pos;            // [Nv] int64 rows fed by video_patch_proj
  torch::Tensor audio_pos;          // [Na] int64 rows fed by audio_patch_proj; audio_logits come from these rows
  torch::Tensor text_pos;           // [Lt'] int64 rows that take the first Lt' refined text rows
  torch::Tensor cu_seqlens;         // [K+1] main attention segments {0, ..., S} (padding is its own segment)
  torch::Tensor refiner_cu_seqlens; // [K'+1] token-refiner segments over the Lt text rows {0, ..., Lt}
  torch::Tensor out_pos;            // optional [Nv'] rows whose video head is returned (default img_pos)
};

struct H3Outputs {
  torch::Tensor video_logits;  // [Nv', Dv] raw video head at out_pos (img_pos), conditioning rows included
  torch::Tensor audio_logits;  // [Na, Da] raw audio head at audio_pos
};

class H3TimeEmbedderImpl : public torch::nn::Module {
 public:
  H3TimeEmbedderImpl(int64_t freq_dim, int64_t hidden, int64_t out);
  // t [M] model time in [0, 1] (unscaled) -> [M, out] in proj_out's dtype; sinusoid [cos | sin] in float32.
  torch::Tensor forward(const torch::Tensor& t);
  torch::nn::Linear proj_in{nullptr}, proj_out{nullptr};

 private:
  int64_t freq_dim_;
};
TORCH_MODULE(H3TimeEmbedder);

// Holds the checkpoint's `rope.inv_freq` [R] (a buffer: loaded and exported, never read; see h3_rope_table).
class H3RopeImpl : public torch::nn::Module {
 public:
  explicit H3RopeImpl(int64_t rope_len);
  torch::Tensor inv_freq;
};
TORCH_MODULE(H3Rope);

class H3TokenRefinerImpl : public torch::nn::Module {
 public:
  H3TokenRefinerImpl(const H3Config& cfg);
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& bounds);  // [Lt, D] -> [Lt, D]
  torch::nn::ModuleList blocks{nullptr};
  RMSNorm final_norm{nullptr};
};
TORCH_MODULE(H3TokenRefiner);

class H3FinalLayerImpl : public torch::nn::Module {
 public:
  H3FinalLayerImpl(const H3Config& cfg);
  // x [S, D], t_emb [M, time_dim], inverse [S] -> video [S, Dv], audio [S, Da] in the heads' dtype
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& t_emb,
                                                  const torch::Tensor& inverse);
  RMSNorm norm{nullptr};
  H3AdaLN adaln_proj{nullptr};
  torch::nn::Linear video_out{nullptr}, audio_out{nullptr};
};
TORCH_MODULE(H3FinalLayer);

struct H3BuildOptions {
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat32;  // blocks, refiner, condition_proj, AdaLN, norms
  bool fp32_islands = true;  // patch projections, time MLP, output heads, rope.inv_freq stay float32 (§1.10)
};

using H3BlockRunner = std::function<torch::Tensor(H3BlockImpl&, const H3BlockInputs&)>;

class H3DiTImpl : public torch::nn::Module {
 public:
  // Builds block by block on opts.device in opts.dtype, so the 33B model never sits whole in host memory.
  explicit H3DiTImpl(const H3Config& cfg, const H3BuildOptions& opts = {});
  H3Outputs forward(const H3Inputs& in);

  // Casts to `dtype`, keeping the fp32 islands in float32 when asked (the release checkpoint's mixed dtypes, so
  // loading and exporting preserve them). to_release_precision() = set_precision(bf16, true).
  void set_precision(torch::ScalarType dtype, bool fp32_islands = true);
  void to_release_precision() { set_precision(torch::kBFloat16, true); }
  // True for checkpoint names that the release keeps in float32.
  static bool is_fp32_island(const std::string& name);
  // The dtype of the residual stream (that of the blocks).
  torch::ScalarType compute_dtype() const { return condition_proj->weight.scalar_type(); }

  void set_attention_kernel(AttentionKernel k);  // every block and the refiner
  void set_block_runner(H3BlockRunner runner) { block_runner_ = std::move(runner); }
  const H3Config& config() const { return cfg_; }

  torch::nn::Linear video_patch_proj{nullptr}, audio_patch_proj{nullptr}, condition_proj{nullptr};
  H3TimeEmbedder time_embedder{nullptr};
  H3Rope rope{nullptr};
  H3TokenRefiner token_refiner{nullptr};
  torch::nn::ModuleList blocks{nullptr};  // H3Block
  H3FinalLayer final_layer{nullptr};

 private:
  H3Config cfg_;
  H3BlockRunner block_runner_;
};
TORCH_MODULE(H3DiT);

// The host copy of a cu_seqlens tensor, checked to run from 0 to `total` without decreasing.
std::vector<int64_t> h3_segment_bounds(const torch::Tensor& cu_seqlens, int64_t total, const char* what);

}  // namespace vdt
