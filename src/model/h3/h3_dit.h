// The MiniMax-H3 DiT (docs/h3_model.md §1.3) under its checkpoint key names: input projections (`video_patch_proj`,
// `audio_patch_proj`, `condition_proj`), `time_embedder`, `rope` (its stored inv_freq is loaded, never read),
// `token_refiner`, `blocks` (H3Block) and `final_layer`. forward takes one packed sequence (h3_packer builds it)
// and returns the raw head outputs at the video and audio rows (≈ x0 − ε: negate for the flow-matching target).
// Precision: built in float32, or in bf16 with the release checkpoint's fp32 islands (§1.10).
// It is also a Denoiser (model/denoiser.h): forward(DenoiserInputs) packs a trainer's latents, text, Picture 1 and
// the audio side stream (bidirectional, or block-causal chunks through h3_causal.h) and returns the unpacked
// predictions of noise − x0 (h3_denoise.cpp).
// Not here: losses, checkpointing or sharding (a block runner wraps blocks from outside).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <functional>

#include "model/denoiser.h"
#include "model/h3/h3_block.h"
#include "model/h3/h3_config.h"

namespace vdt {

// The arguments of the reference MiniMaxH3DiT.forward, one packed sequence of S rows.
struct H3Inputs {
  torch::Tensor x;                   // [1, S, Dv] video rows: conditioning and target video at img_pos, 0 elsewhere
  torch::Tensor audio_x;             // [1, S, Da] audio rows at audio_pos, 0 elsewhere
  torch::Tensor position_ids;        // [1, S, 3] (t, h, w), float64 as built; cast to float32 for RoPE
  torch::Tensor token_tags;          // [S] int64: 0 video, 1 text, 2 audio, -1 padding (clamped to 0)
  torch::Tensor unique_timesteps;    // [M] float32 model time in [0, 1] (1 = clean), sorted
  torch::Tensor inverse_indices;     // [S] int64: each row's index into unique_timesteps
  torch::Tensor prompt_embeds;       // [Lt, text_dim]
  torch::Tensor img_pos;             // [Nv] int64 rows fed by video_patch_proj
  torch::Tensor audio_pos;           // [Na] int64 rows fed by audio_patch_proj; audio_logits come from these rows
  torch::Tensor text_pos;            // [Lt'] int64 rows that take the first Lt' refined text rows
  torch::Tensor cu_seqlens;          // [K+1] main attention segments {0, ..., S} (padding is its own segment)
  torch::Tensor refiner_cu_seqlens;  // [K'+1] token-refiner segments over the Lt text rows {0, ..., Lt}
  torch::Tensor out_pos;             // optional [Nv'] rows whose video head is returned (default img_pos)
  H3AttentionLayout attend;  // optional: which rows see which (block-causal chunks); empty = cu_seqlens segments
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
  bool init = true;  // torch's default init on the host; false: zeros on the device (init_weights or a load follows)
};

class H3DiTImpl : public Denoiser {
 public:
  // Builds block by block on opts.device in opts.dtype, so the 33B model never sits whole in host memory.
  explicit H3DiTImpl(const H3Config& cfg, const H3BuildOptions& opts = {});
  // The reference's forward on one packed sequence.
  H3Outputs forward(const H3Inputs& in);
  // The seam (h3_denoise.cpp). x [B, C, F, H, W] target video, t per sample or per latent frame (0..1000; model
  // time 1 − t/1000), context [B, Lt, text_dim] (or rows with context_ids naming one row per sample), and in extra:
  // "text_tags" [B, Lt] (0 = vision token of the prompt: video AdaLN; default all text), "picture1" [B, C, 1, Hp, Wp]
  // clean Picture 1 latent (a Ref2VA image reference on its own grid, rows 0.999·clean + 0.001·"picture1.noise", at
  // model time max(t_text, 0.999)), "audio" [B, 2, Da, A] with "audio.t" [B, A] (the side stream; none: no audio
  // rows). Block-causal patterns: chunks of attention.chunk_frames latents with their audio steps
  // (h3_audio_chunk_bounds), text and Picture 1 the prefix at model time 0.999 (docs/h3_model.md §4.2 (a)). Returns the
  // video prediction [B, C, F, H, W]; aux->streams["audio"] the audio one.
  torch::Tensor forward(const DenoiserInputs& in, DenoiserAux* aux = nullptr) override;

  // Casts to `dtype`, keeping the fp32 islands in float32 when asked (the release checkpoint's mixed dtypes, so
  // loading and exporting preserve them). to_release_precision() = set_precision(bf16, true).
  void set_precision(torch::ScalarType dtype, bool fp32_islands = true);
  void to_release_precision() { set_precision(torch::kBFloat16, true); }
  // True for checkpoint names that the release keeps in float32.
  static bool is_fp32_island(const std::string& name);
  // The dtype of the residual stream (that of the blocks).
  torch::ScalarType compute_dtype() const override { return condition_proj->weight.scalar_type(); }

  void set_attention_kernel(AttentionKernel k);  // every block and the refiner
  void set_block_runner(BlockRunner runner) override { block_runner_ = std::move(runner); }
  BlockRunner block_runner() const override { return block_runner_; }
  // prefix: one kernel call per query block (default); mask: one masked call over all rows.
  void set_causal_kernel(CausalKernel k) override { causal_kernel_ = k; }
  const H3Config& config() const { return cfg_; }

  // PyTorch's default Linear init (U(±1/sqrt(fan_in)) for weight and bias) from `seed`, norms at 1: H3's pre-training
  // init is not public (docs/h3_model.md §5); this is the random base of tests and benchmarks.
  void init_weights(uint64_t seed) override;
  std::vector<torch::nn::Module*> block_modules() override;
  std::vector<std::string> lora_targets() const override { return {"qkv_proj", "out_proj", "fc1", "fc2"}; }
  std::string family() const override { return "h3"; }
  std::string preset() const override { return cfg_.preset; }
  std::string config_json() const override { return cfg_.to_json(); }
  // The Python trainer's name for this base, "cwm"; its text is the prefix cached with Picture 1 (docs/h3_model.md
  // §4.2 (a)).
  LoraBaseInfo lora_base_info() const override {
    return {"cwm", "prefix: text cached with Picture 1 (docs/h3_model.md §4.2 (a))"};
  }
  std::string architecture_difference(const std::string& config_json) const override;
  int64_t latent_channels() const override { return cfg_.latent_channels; }
  int64_t text_dim() const override { return cfg_.text_dim; }
  int64_t width() const override { return cfg_.hidden; }
  torch::Device device() const override { return condition_proj->weight.device(); }
  std::vector<std::string> side_streams() const override { return {"audio"}; }
  std::vector<int64_t> side_stream_step_shape(const std::string& stream) const override;
  std::vector<int64_t> side_stream_chunks(const std::string& stream, int64_t frames,
                                          int64_t chunk_frames) const override;
  // Picture 1 on the target's grid and the audio rows.
  int64_t extra_rows(int64_t frames, int64_t latent_h, int64_t latent_w, int64_t chunk_frames) const override;
  bool text_in_rows() const override { return true; }   // its text tokens are rows of the packed sequence
  int64_t first_pixel_frame(int64_t k) const override;  // h3_first_pixel_frame
  // Text + Picture 1 + video + audio rows and their padding (docs/h3_model.md §4: the prefix, then the chunks).
  std::string describe_sequence(const WindowShape& window) const override;
  // A stream of chunks with a KV cache (model/kv_stream.h, h3_stream.cpp).
  std::unique_ptr<KvStream> open_stream(const StreamSpec& spec) override;
  double train_flops(const WindowShape& window, bool frozen_base) const override;  // h3_train_flops

  torch::nn::Linear video_patch_proj{nullptr}, audio_patch_proj{nullptr}, condition_proj{nullptr};
  H3TimeEmbedder time_embedder{nullptr};
  H3Rope rope{nullptr};
  H3TokenRefiner token_refiner{nullptr};
  torch::nn::ModuleList blocks{nullptr};  // H3Block
  H3FinalLayer final_layer{nullptr};

 private:
  H3Config cfg_;
  BlockRunner block_runner_;
  CausalKernel causal_kernel_ = CausalKernel::prefix;
};
TORCH_MODULE(H3DiT);

// Model FLOPs of one training step of an H3 DiT on one window (Denoiser::train_flops), docs/BENCHMARKS.md's count:
// per block 2·S·(qkv + out + fc1 + fc2 weights) over the S rows (text, Picture 1, video and audio) + 4·N·Dh per
// attended query/key pair (block-causal: the prefix sees itself, chunk i with its audio the prefix and chunks 0..i),
// plus the token refiner on the text rows.
double h3_train_flops(const H3Config& cfg, const WindowShape& window, bool frozen_base);

// The host copy of a cu_seqlens tensor, checked to run from 0 to `total` without decreasing.
std::vector<int64_t> h3_segment_bounds(const torch::Tensor& cu_seqlens, int64_t total, const char* what);

}  // namespace vdt
