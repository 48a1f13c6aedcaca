// Block-causal attention for the causal workflow (docs/design.md §5, docs/causal.md): the token sequence is cut into
// chunks of `chunk_tokens` (a chunk = some latent frames), and the queries of chunk i see the keys of chunks 0..i.
// Three ways that must agree, forward and backward: `prefix` — one SDPA call per chunk over its key prefix (no mask,
// so the fused kernels stay usable), all chunks in one autograd node (model/ranged_attention.h); `mask` — one SDPA call
// with a boolean block mask; `eager` — the slow, obvious softmax(q k^T / sqrt(Dh) + mask) v (the reference in tests).
// Teacher forcing adds clean context chunks beside the noisy ones: block_causal_mask(..., clean_context) builds that
// mask. Not here: which tokens form a chunk (the trainer), RoPE (applied to q and k before).
#pragma once
#include <torch/types.h>

#include <string>

namespace vdt {

enum class CausalKernel { prefix, mask, eager };
// "prefix" | "mask" | "eager", and the Python trainer's names "fa3" (= prefix) and "flex" (= mask); an error names the
// flag.
CausalKernel causal_kernel_from_string(const std::string& s);
// The flag's spelling of a kernel: "prefix", "mask" or "eager".
const char* causal_kernel_name(CausalKernel k);

// Self-attention's pattern in tokens, the one value blocks and attention take (the model derives it from
// model/denoiser.h's AttentionPattern in latent frames): bidirectional (chunk_tokens 0), block-causal over chunks of
// chunk_tokens, or teacher forcing ([clean | noisy] halves, teacher_forcing_mask).
struct TokenPattern {
  int64_t chunk_tokens = 0;
  bool teacher_forcing = false;
  bool causal() const { return chunk_tokens > 0; }
};

// Boolean [L, L] mask, true = may attend: query chunk i sees key chunks 0..i. L = n_chunks * chunk_tokens.
torch::Tensor block_causal_mask(int64_t n_chunks, int64_t chunk_tokens, const torch::Device& device = torch::kCPU);

// Teacher forcing: the sequence is [clean chunks 0..n-1 | noisy chunks 0..n-1] ([2L, 2L] mask). A clean chunk i sees
// clean chunks 0..i; a noisy chunk i sees clean chunks 0..i-1 and itself.
torch::Tensor teacher_forcing_mask(int64_t n_chunks, int64_t chunk_tokens, const torch::Device& device = torch::kCPU);

// q, k, v [B, N, L, Dh] with L = n_chunks * chunk_tokens -> [B, N, L, Dh]. With teacher_forcing the sequence is
// [clean | noisy] (L = 2 * n_chunks * chunk_tokens) under teacher_forcing_mask: `prefix` then runs the clean half
// block-causally and each noisy chunk over its clean prefix plus itself.
torch::Tensor block_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     int64_t chunk_tokens, CausalKernel kernel, bool teacher_forcing = false);

// Any boolean mask [Lq, Lk] (true = attend), eagerly: the reference for the masked kernels.
torch::Tensor masked_attention_eager(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& mask);

}  // namespace vdt
