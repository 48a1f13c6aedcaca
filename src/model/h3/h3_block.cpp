// H3 blocks, as DiffSynth's MiniMaxH3MLP / MiniMaxH3AdalnProj / MiniMaxH3TokenRefinerBlock / MiniMaxH3DiTBlock.
// Chunk order of the six AdaLN tensors: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp; modality
// 0 video, 1 text, 2 audio (docs/h3_model.md §1.3). Modulation runs per token with index_select, as the reference.
#include "model/h3/h3_block.h"

#include <torch/torch.h>

#include "model/kernels/fused_ops.h"
#include "model/kernels/swiglu.h"
#include "model/lora.h"

namespace vdt {

H3MlpImpl::H3MlpImpl(int64_t dim, int64_t ffn) {
  fc1 = register_module("fc1", h3_linear(dim, 2 * ffn, /*bias=*/false));
  fc2 = register_module("fc2", h3_linear(ffn, dim, /*bias=*/false));
}

torch::Tensor H3MlpImpl::forward(const torch::Tensor& x) {
  // [S, 2F] (gate | up) -> silu(gate) * up [S, F], one node on CUDA (kernels/swiglu.h)
  return lora_or_linear(fc2, kernels::swiglu(lora_or_linear(fc1, x)));
}

H3AdaLNImpl::H3AdaLNImpl(int64_t dim, int64_t time_dim, int64_t chunks, int64_t modalities)
    : dim_(dim), chunks_(chunks), modalities_(modalities) {
  linear = register_module("linear", h3_linear(time_dim, chunks * dim * modalities));
}

std::vector<torch::Tensor> H3AdaLNImpl::forward(const torch::Tensor& t_emb) {
  const int64_t M = t_emb.size(0);
  return project(t_emb).view({M * modalities_, chunks_ * dim_}).chunk(chunks_, -1);  // -> chunks x [M * modalities, D]
}

torch::Tensor H3AdaLNImpl::project(const torch::Tensor& t_emb) {
  return linear(torch::silu(t_emb).to(linear->weight.scalar_type()));  // [M, modalities * chunks * D]
}

torch::Tensor h3_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                          const torch::Tensor& rows) {
  return kernels::h3_modulate(x, shift, scale, rows);  // fused (model/kernels), or the reference with the switch off
}

torch::Tensor h3_gate(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
                      const torch::Tensor& rows) {
  return kernels::h3_gate(x, gate, y, rows);
}

H3RefinerBlockImpl::H3RefinerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim, int64_t ffn, double eps,
                                       double qk_eps) {
  norm1 = register_module("norm1", RMSNorm(dim, eps));
  norm2 = register_module("norm2", RMSNorm(dim, eps));
  attn = register_module("attn", H3Attention(dim, heads, head_dim, qk_eps));
  mlp = register_module("mlp", H3Mlp(dim, ffn));
}

torch::Tensor H3RefinerBlockImpl::forward(const torch::Tensor& x, const H3AttentionLayout& attend) {
  auto h = x + attn(norm1(x), nullptr, attend);  // [Lt, D]
  return h + mlp(norm2(h));
}

H3BlockImpl::H3BlockImpl(int64_t dim, int64_t heads, int64_t head_dim, int64_t ffn, int64_t time_dim, double eps,
                         double qk_eps) {
  norm1 = register_module("norm1", RMSNorm(dim, eps));
  norm2 = register_module("norm2", RMSNorm(dim, eps));
  attn = register_module("attn", H3Attention(dim, heads, head_dim, qk_eps));
  mlp = register_module("mlp", H3Mlp(dim, ffn));
  adaln_proj = register_module("adaln_proj", H3AdaLN(dim, time_dim, /*chunks=*/6, /*modalities=*/3));
}

torch::Tensor H3BlockImpl::forward(const H3BlockInputs& in) {
  TORCH_CHECK(in.x.dim() == 2 && in.ada_rows.dim() == 1 && in.ada_rows.size(0) == in.x.size(0), "H3Block: expected ",
              "x [S, D] and ada_rows [S], got ", in.x.sizes(), " and ", in.ada_rows.sizes());
  auto mod = in.ada.defined() ? in.ada.unbind(0) : adaln_proj(in.t_emb);  // 6 x [3M, D]
  const auto& rows = in.ada_rows;
  auto h = attn(h3_modulate(norm1(in.x), mod[0], mod[1], rows), &in.rope, in.attend, in.kv);
  auto x = h3_gate(in.x, mod[2], h, rows);
  h = mlp(h3_modulate(norm2(x), mod[3], mod[4], rows));
  return h3_gate(x, mod[5], h, rows);
}

}  // namespace vdt
