#include "model/block_causal.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/ranged_attention.h"

namespace vdt {

CausalKernel causal_kernel_from_string(const std::string& s) {
  if (s == "prefix" || s == "fa3")
    return CausalKernel::prefix;  // fa3, flex: the Python trainer's names for the same two
  if (s == "mask" || s == "flex") return CausalKernel::mask;
  if (s == "eager") return CausalKernel::eager;
  VDT_FAIL("--attn ", s, ": expected prefix or mask");
}

const char* causal_kernel_name(CausalKernel k) {
  return k == CausalKernel::prefix ? "prefix" : k == CausalKernel::mask ? "mask" : "eager";
}

torch::Tensor block_causal_mask(int64_t n_chunks, int64_t chunk_tokens, const torch::Device& device) {
  VDT_CHECK(n_chunks >= 1 && chunk_tokens >= 1, "block_causal_mask: ", n_chunks, " chunks of ", chunk_tokens,
            " tokens, expected >= 1 each");
  auto chunk = torch::arange(n_chunks * chunk_tokens, torch::TensorOptions().device(device))
                   .div(chunk_tokens, "floor");     // [L] chunk index of each token
  return chunk.unsqueeze(1) >= chunk.unsqueeze(0);  // [L, L]: key chunk <= query chunk
}

torch::Tensor teacher_forcing_mask(int64_t n_chunks, int64_t chunk_tokens, const torch::Device& device) {
  auto causal = block_causal_mask(n_chunks, chunk_tokens, device);  // [L, L]
  auto chunk = torch::arange(n_chunks * chunk_tokens, torch::TensorOptions().device(device)).div(chunk_tokens, "floor");
  auto strictly_before = chunk.unsqueeze(1) > chunk.unsqueeze(0);  // noisy i -> clean j < i
  auto same = chunk.unsqueeze(1) == chunk.unsqueeze(0);            // noisy i -> noisy i
  auto none = torch::zeros_like(causal);
  auto top = torch::cat({causal, none}, 1);              // clean queries: clean keys only
  auto bottom = torch::cat({strictly_before, same}, 1);  // noisy queries
  return torch::cat({top, bottom}, 0);                   // [2L, 2L]
}

torch::Tensor masked_attention_eager(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& mask) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const auto ct = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;  // at least float32
  auto s = torch::matmul(q.to(ct), k.to(ct).transpose(-2, -1)) * scale;                    // [B, N, Lq, Lk]
  s = s.masked_fill(~mask, -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(s, -1), v.to(ct)).to(q.scalar_type());
}

namespace {
// The prefix kernel's calls as query blocks: chunk i of n sees chunks 0..i; with teacher forcing ([clean | noisy]
// halves) a noisy chunk i sees clean chunks 0..i-1 and itself.
std::vector<QueryBlock> prefix_blocks(int64_t n, int64_t c, bool teacher_forcing) {
  std::vector<QueryBlock> blocks;
  for (int64_t i = 0; i < n; ++i) blocks.push_back({i * c, (i + 1) * c, {{0, (i + 1) * c}}});
  if (!teacher_forcing) return blocks;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = n * c + i * c;
    QueryBlock b{at, at + c, {}};
    if (i > 0) b.keys.emplace_back(0, i * c);
    b.keys.emplace_back(at, at + c);
    blocks.push_back(std::move(b));
  }
  return blocks;
}

// Teacher forcing over [clean | noisy] halves of n chunks each.
torch::Tensor teacher_forcing_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        int64_t chunk_tokens, CausalKernel kernel) {
  const int64_t L = q.size(2), half = L / 2, n = half / chunk_tokens;
  TORCH_CHECK(L % (2 * chunk_tokens) == 0, "teacher forcing: L = ", L, " is not two halves of whole chunks of ",
              chunk_tokens, " tokens");
  if (kernel == CausalKernel::mask)
    return at::scaled_dot_product_attention(q, k, v, teacher_forcing_mask(n, chunk_tokens, q.device()));
  if (kernel == CausalKernel::eager)
    return masked_attention_eager(q, k, v, teacher_forcing_mask(n, chunk_tokens, q.device()));
  if (ranged_attention_supported(q, k, v)) return ranged_attention(q, k, v, prefix_blocks(n, chunk_tokens, true));
  auto clean = block_causal_attention(q.narrow(2, 0, half), k.narrow(2, 0, half), v.narrow(2, 0, half), chunk_tokens,
                                      CausalKernel::prefix);  // [B, N, L/2, Dh]
  std::vector<torch::Tensor> out{clean};
  for (int64_t i = 0; i < n; ++i) {  // noisy chunk i: keys = clean chunks 0..i-1, then itself
    const int64_t at = half + i * chunk_tokens, prefix = i * chunk_tokens;
    auto kk = torch::cat({k.narrow(2, 0, prefix), k.narrow(2, at, chunk_tokens)}, 2);  // [B, N, prefix + chunk, Dh]
    auto vv = torch::cat({v.narrow(2, 0, prefix), v.narrow(2, at, chunk_tokens)}, 2);
    out.push_back(at::scaled_dot_product_attention(q.narrow(2, at, chunk_tokens), kk, vv));
  }
  return torch::cat(out, 2);
}
}  // namespace

torch::Tensor block_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     int64_t chunk_tokens, CausalKernel kernel, bool teacher_forcing) {
  TORCH_CHECK(q.dim() == 4 && q.sizes() == k.sizes() && k.sizes() == v.sizes(),
              "block_causal_attention: expected q, k, v [B, N, L, Dh] of one shape, got ", q.sizes(), k.sizes(),
              v.sizes());
  const int64_t L = q.size(2);
  TORCH_CHECK(chunk_tokens >= 1 && L % chunk_tokens == 0, "block_causal_attention: L = ", L,
              " is not a multiple of chunk_tokens = ", chunk_tokens);
  if (teacher_forcing) return teacher_forcing_attention(q, k, v, chunk_tokens, kernel);
  const int64_t n = L / chunk_tokens;
  switch (kernel) {
    case CausalKernel::prefix: {
      if (ranged_attention_supported(q, k, v)) return ranged_attention(q, k, v, prefix_blocks(n, chunk_tokens, false));
      std::vector<torch::Tensor> out;  // no fused backend (the math one): per-chunk calls through autograd
      for (int64_t i = 0; i < n; ++i) {
        const int64_t end = (i + 1) * chunk_tokens;
        out.push_back(at::scaled_dot_product_attention(q.narrow(2, i * chunk_tokens, chunk_tokens), k.narrow(2, 0, end),
                                                       v.narrow(2, 0, end)));
      }
      return torch::cat(out, 2);
    }
    case CausalKernel::mask:
      return at::scaled_dot_product_attention(q, k, v, block_causal_mask(n, chunk_tokens, q.device()));
    case CausalKernel::eager:
      return masked_attention_eager(q, k, v, block_causal_mask(n, chunk_tokens, q.device()));
  }
  VDT_FAIL("block_causal_attention: unknown kernel");
}

}  // namespace vdt
