// gc_sem_cond, the semantic-map adapter of the gc25d SFT (docs/design.md §1): per-pixel part ids [B, F, Hs, Ws] (uint8,
// 255 = UNKNOWN) -> one-hot over the vocabulary (UNKNOWN = all zeros) -> Conv3d with kernel = stride = (1, 2s, 2s)
// onto the DiT token grid -> SiLU -> Linear -> SiLU -> `proj_out` Linear to D, zero-initialised, so the model starts
// exactly as the base model (sem_rms = 0 at step 1). Six tensors: patch.{weight,bias}, mlp.{weight,bias},
// proj_out.{weight,bias}. Not here: vocab folding (data/) or where the ids come from.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <string>

namespace vdt {

struct SemCondConfig {
  int64_t vocab_size = 20;  // K: 20 for vocab "parts", 10 for "ids"
  int64_t scale = 2;        // s = Hs / H, the id-map upsampling factor over the latent (1, 2 or 4)
  int64_t hidden = 512;     // adapter width
  std::string vocab = "parts";
  void validate() const;
};

constexpr int64_t kSemUnknownId = 255;

class SemCondImpl : public torch::nn::Module {
 public:
  SemCondImpl(const SemCondConfig& cfg, int64_t dim, std::array<int64_t, 3> patch);
  // ids [B, F, Hs, Ws] uint8 -> [B, L, D] on the token grid (L = F * Hs/(2s) * Ws/(2s) for patch 1x2x2)
  torch::Tensor forward(const torch::Tensor& ids);
  const SemCondConfig& config() const { return cfg_; }
  // True while proj_out is all zeros (the adapter contributes nothing).
  bool is_zero_output() const;

  torch::nn::Conv3d patch{nullptr};
  torch::nn::Linear mlp{nullptr}, proj_out{nullptr};

 private:
  SemCondConfig cfg_;
};
TORCH_MODULE(SemCond);

// The vocabulary size of a named vocabulary ("parts" 20, "ids" 10); throws naming --vocab otherwise.
int64_t sem_vocab_size(const std::string& vocab);

}  // namespace vdt
