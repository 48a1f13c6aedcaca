// The base-model seam: what the trainers, validation, sampling, checkpoints and `vdt bench` need from a denoiser,
// whatever its family (the Wan DiT today, MiniMax-H3 next). Inputs are latents on a grid, timesteps on the 0..1000
// scale (one per sample, per latent frame or per token), text and optional conditioning; the output is the
// flow-matching prediction of noise − x0 on the same grid. Mechanisms are applied from outside through the blocks
// (activation checkpointing, sharded frozen weights, LoRA targets) and a block runner, so the model stays free of
// training concerns. Not here: a family's architecture (model/wan_dit.h, ...), which family a preset names
// (model/denoiser_registry.h).
#pragma once
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/block_causal.h"
#include "model/sem_cond.h"

namespace vdt {

// Which tokens see which in self-attention: bidirectional, block-causal over chunks of `chunk_frames` latent frames
// (chunk i sees chunks 0..i), or teacher forcing (the latents hold [clean span | noisy span]; both halves take the
// span's positions; model/block_causal.h's teacher-forcing mask).
struct AttentionPattern {
  int64_t chunk_frames = 0;  // 0: bidirectional
  bool teacher_forcing = false;
  static AttentionPattern bidirectional() { return {}; }
  static AttentionPattern block_causal(int64_t chunk_frames) { return {chunk_frames, false}; }
  static AttentionPattern forcing(int64_t chunk_frames, bool teacher) { return {chunk_frames, teacher}; }
  bool causal() const { return chunk_frames > 0; }
};

struct DenoiserInputs {
  torch::Tensor x;            // [B, C, F, H, W] noisy latents
  torch::Tensor t;            // [B] one timestep, [B, F'] per latent frame, or [B, L] per token (0..1000 scale)
  torch::Tensor context;      // [B, Lt, text_dim], or distinct rows [R, Lt, text_dim] when context_ids is given
  torch::Tensor context_ids;  // optional [B, F'] row of `context` for each cell (latent frame)
  torch::Tensor sem_ids;      // [B, F, Hs, Ws] uint8 part ids, required once a semantic-map adapter is installed
  AttentionPattern attention;
  // Family-specific inputs, documented by each family: conditioning (H3: "picture1", "text_tags") and side streams
  // (side_streams(): the noisy stream under its name, [B, ..., A] with steps last, and its timesteps [B, A] under
  // name + ".t"; under teacher forcing both hold [clean | noisy] along the steps, as x does along the frames).
  std::map<std::string, torch::Tensor> extra;
  // Optional (last, so brace-initialised inputs keep their order): t as its distinct values t_rows [U] float32 and
  // each group's row t_index [B, G] int64 (t's shape, [B] as [B, 1]), found on the host by distinct_timestep_rows
  // (model/embeddings.h) so no device sync is needed. A family may then run its time MLP on U rows (SFT: frame 0 at 0
  // and the rest at t, U = 2 per sample; causal: one per chunk) instead of B * G; t stays the reference.
  torch::Tensor t_rows, t_index;
};

// Diagnostics of one forward, filled when asked for: RMS of the adapter output and of the patch embedding.
struct DenoiserAux {
  torch::Tensor sem_rms, x_rms;                  // 0-dim float32, detached
  std::map<std::string, torch::Tensor> streams;  // prediction of noise − x0 for each side stream given, its shape
};

// One block call packaged for a runner from outside: the block, its differentiable inputs (inputs[0] is the
// residual stream [B, L, D], the one an offload moves to the host) and a function that runs the block on those inputs
// or on detached copies of them (everything else the block needs is captured inside).
struct BlockCall {
  torch::nn::Module& block;
  std::vector<torch::Tensor> inputs;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> run;
};
using BlockRunner = std::function<torch::Tensor(const BlockCall&)>;

// A training window as a trainer feeds it, for Denoiser::describe_sequence.
struct WindowShape {
  int64_t text_len = 0, frames = 0, latent_h = 0, latent_w = 0, chunk_frames = 0;
  int64_t copies = 1;        // 2 under teacher forcing: the span and the side streams as [clean | noisy]
  int64_t cond_rows = 0;     // rows of the conditioning image the data carries (H3: Picture 1)
  std::string cond_variant;  // which one (H3: --picture1 native | 2048)
};

// How a LoRA file names its base: metadata "base" (the name the base's own trainers use) and "text_handling".
struct LoraBaseInfo {
  std::string base, text_handling;
};

class KvStream;  // model/kv_stream.h
struct StreamSpec;

class Denoiser : public torch::nn::Module {
 public:
  // -> [B, C_out, F, H, W]: the prediction of noise − x0.
  virtual torch::Tensor forward(const DenoiserInputs& in, DenoiserAux* aux = nullptr) = 0;
  // The repeated blocks in forward order: what checkpointing, sharding and LoRA are applied to.
  virtual std::vector<torch::nn::Module*> block_modules() = 0;
  virtual void set_block_runner(BlockRunner runner) = 0;
  virtual BlockRunner block_runner() const = 0;        // the one set (empty: blocks run plainly), for wrapping it
  virtual void set_causal_kernel(CausalKernel k) = 0;  // prefix (default) or mask, for block-causal patterns
  // Re-initialises every parameter from `seed` as the family's reference does for training from scratch.
  virtual void init_weights(uint64_t seed) = 0;
  // A random frozen base for tests and benchmarks: init_weights plus whatever makes gradients reach a LoRA (Wan's
  // zero-initialised head would block them).
  virtual void init_random_base(uint64_t seed) { init_weights(seed); }
  // Last module-name components of the Linears a LoRA attaches to by default (model/lora.h).
  virtual std::vector<std::string> lora_targets() const = 0;
  virtual std::string family() const = 0;       // "wan", ...
  virtual std::string preset() const = 0;       // the preset name, or "custom"
  virtual std::string config_json() const = 0;  // the architecture, as stored in checkpoint metadata
  // Empty when `config_json` (another run's) describes the same architecture, else what differs, field by field.
  virtual std::string architecture_difference(const std::string& config_json) const = 0;
  virtual int64_t latent_channels() const = 0;
  virtual int64_t text_dim() const = 0;
  virtual int64_t width() const = 0;  // the residual width D
  virtual torch::Device device() const = 0;
  virtual torch::ScalarType compute_dtype() const = 0;  // of the residual stream (fp32 islands aside)
  // The semantic-map adapter (docs/design.md §4, model/sem_cond.h) added from `sem_ids`; families without it refuse.
  virtual void install_sem_cond(const SemCondConfig& cfg) {
    throw std::runtime_error("the " + family() + " base has no semantic-map adapter (gc_sem_cond)");
  }
  virtual bool has_sem_cond() const { return false; }
  // Streams the family denoises beside the video latents, steps on their last axis (H3: "audio" [B, 2, 32, A]); the
  // trainers noise and score them per chunk as they do the video. Empty for families without one.
  virtual std::vector<std::string> side_streams() const { return {}; }
  // For a span of `frames` latent frames cut into chunks of `chunk_frames`: the first step of each chunk in `stream`
  // and the span's length in steps (chunks + 1 values, from 0).
  virtual std::vector<int64_t> side_stream_chunks(const std::string& stream, int64_t frames,
                                                  int64_t chunk_frames) const {
    throw std::runtime_error("the " + family() + " base has no side stream '" + stream + "'");
  }
  // One step of `stream` without batch and steps (H3's audio: {2, Da}): a step's shape for noise.
  virtual std::vector<int64_t> side_stream_step_shape(const std::string& stream) const {
    throw std::runtime_error("the " + family() + " base has no side stream '" + stream + "'");
  }
  // Rows the base runs on besides the video tokens and the text, for a span of `frames` latent frames on a latent_h x
  // latent_w grid in chunks of `chunk_frames` with its conditioning on the target's grid (H3: Picture 1 and the
  // audio rows); 0 for a base that runs on those alone (the default).
  virtual int64_t extra_rows(int64_t frames, int64_t latent_h, int64_t latent_w, int64_t chunk_frames) const {
    return 0;
  }
  // Whether the text runs in the blocks' residual stream as rows of its own (H3: no cross-attention) rather than as
  // the cross-attention's context beside the video tokens (the default).
  virtual bool text_in_rows() const { return false; }
  // One line on how the base lays out a training window in its sequence, for a trainer's start-up table; empty
  // (the default) when the sequence is the video tokens with the text beside them.
  virtual std::string describe_sequence(const WindowShape& window) const { return {}; }
  // The metadata a LoRA file of this base carries to name it (LoraBaseInfo).
  virtual LoraBaseInfo lora_base_info() const = 0;
  // Pixel frames before latent frame k (the VAE's clock: Wan 4k - 3 after frame 0, H3 clips of 17 frames per 5).
  virtual int64_t first_pixel_frame(int64_t k) const = 0;
  // Streaming generation with a KV cache (model/kv_stream.h): a stream of chunks over this model; families without
  // one refuse (the default).
  virtual std::unique_ptr<KvStream> open_stream(const StreamSpec& spec);
  // Model FLOPs of one training step on one window (docs/BENCHMARKS.md, "MFU"): the GEMMs, and self-attention by the
  // query/key pairs it computes under the window's pattern (chunk_frames 0: every pair; block-causal: each chunk
  // against the prefix and the chunks up to itself). A step is 3x the forward; with a frozen base (LoRA) 2x, the
  // backward computing input gradients only. Recomputation is not counted.
  virtual double train_flops(const WindowShape& window, bool frozen_base) const = 0;
};

}  // namespace vdt
