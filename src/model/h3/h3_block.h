// H3 blocks under their checkpoint names (docs/h3_model.md §1.3): the SwiGLU `mlp` (fc1 = [gate; up]), the AdaLN
// projection
// (`adaln_proj.linear`: SiLU(t_emb) -> one row per (timestep, modality)), the token-refiner block (plain pre-norm,
// no AdaLN, no RoPE) and the DiT block `H3Block` (per-token AdaLN picked by row index). Blocks are separate modules
// so checkpointing, sharding and LoRA can be applied to them from outside. Not here: the stack (h3_dit).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include "model/h3/h3_attention.h"

namespace vdt {

class H3MlpImpl : public torch::nn::Module {
 public:
  H3MlpImpl(int64_t dim, int64_t ffn);
  torch::Tensor forward(const torch::Tensor& x);  // [S, D] -> [S, D]
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(H3Mlp);

// linear(SiLU(t_emb)) viewed as [M * modalities, chunks * D] and cut into `chunks` tensors [M * modalities, D]:
// row m * modalities + modality holds timestep m's slice for that modality. SiLU runs in t_emb's dtype (float32 when
// the time MLP is an fp32 island), and the result is cast to the linear's dtype before it.
class H3AdaLNImpl : public torch::nn::Module {
 public:
  H3AdaLNImpl(int64_t dim, int64_t time_dim, int64_t chunks, int64_t modalities);
  std::vector<torch::Tensor> forward(const torch::Tensor& t_emb);  // [M, time_dim] -> chunks x [M*modalities, D]
  // linear(SiLU(t_emb)) alone: [M, time_dim] -> [M, modalities * chunks * D] (what a stream caches per timestep).
  torch::Tensor project(const torch::Tensor& t_emb);
  torch::nn::Linear linear{nullptr};

 private:
  int64_t dim_, chunks_, modalities_;
};
TORCH_MODULE(H3AdaLN);

class H3RefinerBlockImpl : public torch::nn::Module {
 public:
  H3RefinerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim, int64_t ffn, double eps, double qk_eps);
  torch::Tensor forward(const torch::Tensor& x, const H3AttentionLayout& attend);  // [Lt, D] -> [Lt, D]
  RMSNorm norm1{nullptr}, norm2{nullptr};
  H3Attention attn{nullptr};
  H3Mlp mlp{nullptr};
};
TORCH_MODULE(H3RefinerBlock);

struct H3BlockInputs {
  torch::Tensor x;           // [S, D] residual stream
  torch::Tensor t_emb;       // [M, time_dim] time MLP output (no SiLU yet)
  torch::Tensor ada_rows;    // [S] int64: inverse_index * 3 + max(tag, 0), the AdaLN row of each token
  torch::Tensor ada;         // [6, 3M', D]: the six AdaLN tensors of M' timesteps precomputed, each contiguous (a
                             // stream's cache, whose rows ada_rows then index); undefined: computed here from t_emb
  H3RopeTable rope;          // [S, 6R]
  H3AttentionLayout attend;  // which rows see which (packed segments, or block-causal chunks)
  KvSlot kv;  // a stream's cache (model/kv_cache.h): x holds the new rows, which attend to the cache and themselves
};

class H3BlockImpl : public torch::nn::Module {
 public:
  H3BlockImpl(int64_t dim, int64_t heads, int64_t head_dim, int64_t ffn, int64_t time_dim, double eps, double qk_eps);
  torch::Tensor forward(const H3BlockInputs& in);  // -> [S, D]
  RMSNorm norm1{nullptr}, norm2{nullptr};
  H3Attention attn{nullptr};
  H3Mlp mlp{nullptr};
  H3AdaLN adaln_proj{nullptr};
};
TORCH_MODULE(H3Block);

// norm(x) * (1 + scale[rows]) + shift[rows]: x [S, D], shift/scale [R, D], rows [S] -> [S, D] in x's dtype.
torch::Tensor h3_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                          const torch::Tensor& rows);
// x + gate[rows] * y: x, y [S, D], gate [R, D], rows [S] -> [S, D] in x's dtype.
torch::Tensor h3_gate(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
                      const torch::Tensor& rows);

}  // namespace vdt
