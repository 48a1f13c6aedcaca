// One forward and backward of a tiny base of either family (Wan `tiny`, MiniMax-H3 `h3-tiny`) on fixed random inputs,
// for tests that compare gradients across mechanisms applied from outside (checkpointing modes, FP8 linears).
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "model/h3/h3_causal.h"
#include "model/h3/h3_dit.h"
#include "model/lora.h"
#include "model/wan_dit.h"

namespace vdt::test {

enum class Family { wan, wan_cells, h3 };  // wan_cells: Wan with per-cell text (distinct rows, a row per frame)

struct TinyGrads {
  std::map<std::string, torch::Tensor> grads;  // every trainable parameter's, and "input x" (the latents')
  torch::Tensor out;                           // the model output, detached
};

// The base (seed 5) and inputs (seed 0); with `lora` a rank-2 LoRA (B non-zero) on a frozen base; `causal_chunk` > 0
// a block-causal pattern; `prepare` applies the mechanisms under test to the model; then a fixed loss's backward.
// With a LoRA, expects no weight gradient outside the factors.
inline TinyGrads tiny_grads(Family family, bool lora, int64_t causal_chunk,
                            const std::function<void(Denoiser&)>& prepare) {
  torch::manual_seed(0);
  std::shared_ptr<Denoiser> m;
  DenoiserInputs in;
  if (family != Family::h3) {
    auto w = WanDiT(preset_config("tiny"));
    w->init_random_base(5);
    m = w.ptr();
    in.x = torch::randn({1, 16, 4, 4, 4});               // [B, C, F, H, W]
    in.t = torch::tensor({{0.0, 600.0, 600.0, 250.0}});  // [B, F]
    in.context = torch::randn({1, 5, 64});               // [B, Lt, text_dim]
    if (family == Family::wan_cells) {
      in.context = torch::randn({3, 5, 64});           // rows [R, Lt, text_dim]
      in.context_ids = torch::tensor({{0, 2, 2, 1}});  // [B, F] the row of each latent frame
    }
  } else {
    auto h = H3DiT(h3_preset("h3-tiny"));
    h->init_random_base(5);
    m = h.ptr();
    in.x = torch::randn({1, 24, 4, 4, 4});
    in.t = torch::rand({1, 4}) * 1000;
    in.context = torch::randn({1, 6, 48});
    in.extra["picture1"] = torch::randn({1, 24, 1, 2, 4});
    in.extra["audio"] = torch::randn({1, 2, 32, h3_span_audio_steps(4)});
    in.extra["audio.t"] = torch::rand({1, h3_span_audio_steps(4)}) * 1000;
    in.extra["text_tags"] = torch::tensor({{1, 0, 0, 1, 1, 1}});
  }
  if (causal_chunk > 0) in.attention = AttentionPattern::block_causal(causal_chunk);
  std::vector<std::pair<std::string, torch::Tensor>> trainable;
  if (lora) {
    LoraConfig lc;
    lc.rank = 2, lc.targets = m->lora_targets();
    trainable = attach_lora(*m, lc, 3);
    torch::NoGradGuard ng;
    for (auto& [n, p] : trainable) p.normal_(0, 0.1);
  } else {
    for (auto& kv : m->named_parameters()) trainable.emplace_back(kv.key(), kv.value());
  }
  prepare(*m);
  in.x = in.x.clone().requires_grad_(true);
  DenoiserAux aux;
  auto out = m->forward(in, &aux);
  auto loss = (out * torch::linspace(-1, 1, out.numel()).view_as(out)).sum();
  for (auto& [name, s] : aux.streams) loss = loss + s.square().mean();
  loss.backward();
  TinyGrads r;
  for (auto& [n, p] : trainable) r.grads[n] = p.grad().defined() ? p.grad().clone() : torch::zeros_like(p);
  r.grads["input x"] = in.x.grad().clone();
  r.out = out.detach();
  if (lora)  // a frozen base: no weight gradient anywhere outside the factors
    for (auto& kv : m->named_parameters())
      if (kv.key().find(".lora_") == std::string::npos) {
        EXPECT_FALSE(kv.value().requires_grad()) << kv.key();
        EXPECT_FALSE(kv.value().grad().defined()) << kv.key();
      }
  return r;
}

}  // namespace vdt::test
