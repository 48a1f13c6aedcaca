// gc_sem_cond. The one-hot uses K+1 classes with UNKNOWN mapped to the extra class, which is then dropped, so UNKNOWN
// pixels are all-zero vectors as the Python trainer specifies.
#include "model/sem_cond.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

void SemCondConfig::validate() const {
  VDT_CHECK(vocab_size > 0 && vocab_size < kSemUnknownId, "gc_sem_cond: vocab size ", vocab_size, " must be in 1..254");
  VDT_CHECK(scale == 1 || scale == 2 || scale == 4, "gc_sem_cond: sem_scale ", scale, " must be 1, 2 or 4");
  VDT_CHECK(hidden > 0, "gc_sem_cond: hidden width must be positive");
}

int64_t sem_vocab_size(const std::string& vocab) {
  if (vocab == "parts") return 20;
  if (vocab == "ids") return 10;
  VDT_FAIL("--vocab: expected parts or ids, got '", vocab, "'");
}

SemCondImpl::SemCondImpl(const SemCondConfig& cfg, int64_t dim, std::array<int64_t, 3> p) : cfg_(cfg) {
  cfg.validate();
  const int64_t s = cfg.scale;
  patch = register_module(
      "patch", torch::nn::Conv3d(torch::nn::Conv3dOptions(cfg.vocab_size, cfg.hidden, {p[0], p[1] * s, p[2] * s})
                                     .stride({p[0], p[1] * s, p[2] * s})));
  mlp = register_module("mlp", torch::nn::Linear(cfg.hidden, cfg.hidden));
  proj_out = register_module("proj_out", torch::nn::Linear(cfg.hidden, dim));
  torch::NoGradGuard ng;
  proj_out->weight.zero_();
  proj_out->bias.zero_();
}

bool SemCondImpl::is_zero_output() const {
  return proj_out->weight.count_nonzero().item<int64_t>() == 0 && proj_out->bias.count_nonzero().item<int64_t>() == 0;
}

torch::Tensor SemCondImpl::forward(const torch::Tensor& ids) {
  TORCH_CHECK(ids.dim() == 4 && ids.scalar_type() == torch::kByte,
              "gc_sem_cond: expected ids [B, F, Hs, Ws] uint8, got ", ids.sizes(), " ", ids.scalar_type());
  const int64_t K = cfg_.vocab_size;
  auto cls = ids.to(torch::kLong);
  cls = torch::where(cls == kSemUnknownId, torch::full_like(cls, K), cls);
  TORCH_CHECK(cls.max().item<int64_t>() <= K, "gc_sem_cond: id ", cls.max().item<int64_t>(),
              " is outside the vocabulary of ", K, " (255 = UNKNOWN)");
  const auto dtype = patch->weight.scalar_type();
  auto onehot = torch::one_hot(cls, K + 1).slice(-1, 0, K);  // [B, F, Hs, Ws, K]
  onehot = onehot.permute({0, 4, 1, 2, 3}).to(dtype);        // -> [B, K, F, Hs, Ws]
  auto h = patch(onehot).flatten(2).transpose(1, 2);         // [B, hidden, F', H', W'] -> [B, L, hidden]
  return proj_out(torch::silu(mlp(torch::silu(h))));         // [B, L, D]
}

}  // namespace vdt
