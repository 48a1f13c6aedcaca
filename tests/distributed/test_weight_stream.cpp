// Weight streaming and the FP8 base (distributed/weight_stream.h, distributed/fp8_base.h) on the CPU, where the
// stored copy lives apart from the parameters and is copied in for each use: a streamed model's output and every
// gradient (LoRA factors and latents) equal the resident model's under block and selective checkpointing with the
// offload on, Wan tiny and h3-tiny; the streamed parameters are empty between uses; an FP8 base equals a resident base
// holding the dequantized weights; the quantization keeps its error bound and its fast dequantization equals the
// reference.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <functional>

#include "distributed/activation_checkpoint.h"
#include "distributed/fp8_base.h"
#include "distributed/weight_stream.h"
#include "core/error.h"
#include "test_util.h"
#include "train/tiny_grads_test_util.h"

namespace vdt {
namespace {

using test::Family;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The mechanisms of one run: checkpointing (with the offload, a no-op on CPU tensors), and a weight stream around
// every run of a block.
struct Setup {
  Checkpointing mode = Checkpointing::block;
  std::vector<int64_t> streamed;  // empty and !fp8: resident
  int64_t prefetch = 1;
  bool fp8 = false;
};

test::TinyGrads run(Family family, const Setup& s, std::shared_ptr<WeightStream>* out = nullptr,
                    const std::function<void(Denoiser&)>& before = {}) {
  std::shared_ptr<WeightStream> stream;
  auto r = test::tiny_grads(family, /*lora=*/true, /*causal_chunk=*/family == Family::h3 ? 2 : 1, [&](Denoiser& m) {
    if (before) before(m);
    CheckpointOptions o;
    o.selective = s.mode == Checkpointing::selective, o.offload_inputs = true;
    if (!s.streamed.empty() || s.fp8) {
      WeightStreamOptions wo;
      wo.streamed = s.streamed, wo.prefetch = s.prefetch, wo.fp8_base = s.fp8;
      stream = std::make_shared<WeightStream>(m, torch::kCPU, wo);
      o.before = [stream](torch::nn::Module& b) { stream->gather(b); };
      o.after = [stream](torch::nn::Module& b) { stream->release(b); };
    }
    enable_block_checkpointing(m, o);
  });
  if (out) *out = stream;
  return r;
}

void expect_equal(const test::TinyGrads& ref, const test::TinyGrads& got, const std::string& what) {
  EXPECT_TRUE(torch::equal(ref.out, got.out)) << what << ": output";
  ASSERT_EQ(ref.grads.size(), got.grads.size()) << what;
  int nonzero = 0;
  for (const auto& [k, v] : ref.grads) {
    nonzero += v.abs().max().item<double>() > 0;
    EXPECT_TRUE(torch::equal(v, got.grads.at(k))) << k << " " << what;
  }
  EXPECT_GT(nonzero, static_cast<int>(ref.grads.size()) / 2) << what;
}

TEST(WeightStream, StreamedGradientsEqualResident) {
  for (const auto family : {Family::wan, Family::h3})
    for (const auto mode : {Checkpointing::block, Checkpointing::selective}) {
      const std::string what = std::string(family == Family::h3 ? "h3-tiny " : "tiny ") + checkpointing_name(mode);
      const auto resident = run(family, {mode});
      const int64_t n = family == Family::h3 ? h3_preset("h3-tiny").num_layers : preset_config("tiny").num_layers;
      for (const int64_t prefetch : {1, 2})
        for (const int64_t count : {n, int64_t{1}}) {
          std::shared_ptr<WeightStream> ws;
          const auto indices = streamed_block_indices(n, count);
          const auto streamed = run(family, {mode, indices, prefetch}, &ws);
          const auto label = what + " " + std::to_string(count) + " streamed, prefetch " + std::to_string(prefetch);
          expect_equal(resident, streamed, label);
          ASSERT_TRUE(ws);
          EXPECT_EQ(ws->streamed_blocks(), count);
          EXPECT_GT(ws->host_bytes(), 0);
          // each streamed block copied for its forward and its recompute (the last block stays across the turn),
          // plus the next step's prefetch
          const int64_t turn = indices.back() == n - 1 ? 1 : 0;
          EXPECT_GE(ws->copies(), 2 * count - turn) << label;
          EXPECT_LE(ws->copies(), 2 * count - turn + prefetch) << label;
        }
    }
}

TEST(WeightStream, StreamedWeightsAreEmptyBetweenUsesAndComeBackWhole) {
  auto m = WanDiT(preset_config("tiny"));
  m->init_random_base(5);
  LoraConfig lc;
  lc.rank = 2, lc.targets = m->lora_targets();
  attach_lora(*m, lc, 3);
  auto& block = *m->blocks[0]->as<WanBlockImpl>();
  std::map<std::string, torch::Tensor> before;
  for (const auto& kv : block.named_parameters()) before[kv.key()] = kv.value().detach().clone();
  WeightStream ws(*m, torch::kCPU, {.streamed = {0}});
  for (const auto& kv : block.named_parameters()) {
    const bool lora = kv.key().find("lora_") != std::string::npos;
    EXPECT_EQ(kv.value().numel(), lora ? before[kv.key()].numel() : 0) << kv.key();
  }
  EXPECT_GT(m->blocks[1]->as<WanBlockImpl>()->self_attn->q->weight.numel(), 0);  // not streamed: untouched
  ws.gather(block);
  for (const auto& kv : block.named_parameters()) EXPECT_TRUE(torch::equal(kv.value(), before[kv.key()])) << kv.key();
  ws.release(block);
  EXPECT_EQ(block.self_attn->q->weight.numel(), 0);
  // the last block, gathered on the way up, stays for the recompute that comes next; its second release frees it
  auto& last = *m->blocks[1]->as<WanBlockImpl>();
  WeightStream all(*m, torch::kCPU, {.streamed = {1}});
  all.gather(block), all.gather(last), all.release(last);
  EXPECT_GT(last.self_attn->q->weight.numel(), 0);
  all.gather(last), all.release(last);
  EXPECT_EQ(last.self_attn->q->weight.numel(), 0);
  EXPECT_NE(ws.describe().find("1 of 2 blocks"), std::string::npos) << ws.describe();
}

TEST(WeightStream, SpreadsTheStreamedBlocks) {
  EXPECT_EQ(streamed_block_indices(8, 2), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(streamed_block_indices(4, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(streamed_block_indices(4, 0).empty());
  EXPECT_EQ(streamed_block_indices(5, 3).size(), 3u);
  EXPECT_THROW(streamed_block_indices(4, 5), Error);
}

// The FP8 base's gradients equal those of a resident base whose frozen 2-D block weights hold their dequantized
// values (fp32), resident or streamed.
TEST(WeightStream, Fp8BaseEqualsTheDequantizedWeights) {
  auto dequantized = [](Denoiser& m) {
    torch::NoGradGuard ng;
    int n = 0;
    for (auto& kv : m.named_parameters())
      if (kv.key().rfind("blocks.", 0) == 0 && stored_as_fp8(kv.key(), kv.value(), m.lora_targets())) {
        kv.value().copy_(dequantize_weight_reference(quantize_weight(kv.value()), kv.value().scalar_type()));
        ++n;
      }
    EXPECT_GT(n, 0);
  };
  for (const auto family : {Family::wan, Family::h3}) {
    const auto ref = run(family, {Checkpointing::block}, nullptr, dequantized);
    std::shared_ptr<WeightStream> ws;
    expect_equal(ref, run(family, {Checkpointing::block, {}, 1, true}, &ws), "fp8 resident");
    EXPECT_GT(ws->device_bytes(), 0);
    EXPECT_EQ(ws->host_bytes(), 0);
    expect_equal(ref, run(family, {Checkpointing::selective, {1}, 1, true}), "fp8 streamed, selective");
    // and it moves the result: the base is not what it was
    EXPECT_FALSE(torch::equal(run(family, {Checkpointing::block}).out, ref.out));
  }
}

TEST(Fp8Base, QuantizationKeepsItsBoundAndTheFastDequantizationEqualsTheReference) {
  torch::manual_seed(0);
  // rows of very different magnitudes, and values far below each row's maximum (E4M3's subnormals)
  auto w = torch::randn({64, 96}) * torch::logspace(-6, 2, 64).unsqueeze(1);
  w.index_put_({torch::indexing::Slice(), 0}, 0);
  w[3][5] = 1e-9;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const auto wd = w.to(dtype);
    const auto q = quantize_weight(wd);
    EXPECT_EQ(q.q.scalar_type(), torch::kFloat8_e4m3fn);
    EXPECT_EQ(q.scale.sizes(), (std::vector<int64_t>{64}));
    const auto ref = dequantize_weight_reference(q, torch::kFloat32);
    const auto err = (wd.to(torch::kFloat32) - ref).abs();
    EXPECT_TRUE((err <= fp8_error_bound(wd, q.scale)).all().item<bool>())
        << "largest excess " << (err - fp8_error_bound(wd, q.scale)).max().item<double>();
    // the bound is tight: some element uses most of it
    EXPECT_GT((err / fp8_error_bound(wd, q.scale)).max().item<double>(), 0.5);
    auto fast = torch::empty(wd.sizes(), wd.options());
    dequantize_weight_into(q.q, q.scale, fast);
    EXPECT_TRUE(torch::equal(fast, dequantize_weight_reference(q, dtype)));
    // quantizing the dequantized weight again (--fp8's GEMMs) gives the same codes, the scales within 2^-8
    const auto again = quantize_weight(fast);
    EXPECT_TRUE(torch::equal(again.q.to(torch::kFloat32), q.q.to(torch::kFloat32)));
    EXPECT_LE(((again.scale - q.scale).abs() / q.scale).max().item<double>(), 1.0 / 256);
  }
}

TEST(Fp8Base, OnlyTheFrozenLinearsTheLoraTargetsAreStoredAsFp8) {
  const std::vector<std::string> wan = {"q", "k", "v", "o", "ffn.0", "ffn.2"};
  const auto w = torch::zeros({4, 4});
  EXPECT_TRUE(stored_as_fp8("blocks.0.self_attn.q.weight", w, wan));
  EXPECT_TRUE(stored_as_fp8("blocks.3.ffn.2.weight", w, wan));
  EXPECT_FALSE(stored_as_fp8("blocks.0.self_attn.q.bias", torch::zeros({4}), wan));
  EXPECT_FALSE(stored_as_fp8("blocks.0.self_attn.norm_q.weight", torch::zeros({4}), wan));
  EXPECT_FALSE(stored_as_fp8("blocks.0.adaln_proj.linear.weight", w, {"qkv_proj", "out_proj", "fc1", "fc2"}));
  EXPECT_FALSE(stored_as_fp8("blocks.0.self_attn.q.lora_A.weight", torch::zeros({4, 4}).requires_grad_(), wan));
}

TEST(Fp8Base, TheFileRoundTripsAndNamesWhatIsWrong) {
  auto build = [] {
    auto m = WanDiT(preset_config("tiny"));
    m->init_random_base(5);
    LoraConfig lc;
    lc.rank = 2, lc.targets = m->lora_targets();
    attach_lora(*m, lc, 3);
    return m;
  };
  auto m = build();
  test::TempDir dir;
  const auto path = dir.file("base_fp8.safetensors");
  const int64_t n = save_fp8_base(*m, path);
  EXPECT_GT(n, 0);
  auto codes = load_fp8_base(*m, path);
  EXPECT_EQ(static_cast<int64_t>(codes.size()), n);
  const auto& w = m->blocks[0]->as<WanBlockImpl>()->self_attn->q->weight;
  const auto direct = quantize_weight(w);
  const auto& fromfile = codes.at("blocks.0.self_attn.q.weight");
  EXPECT_TRUE(torch::equal(fromfile.q.to(torch::kFloat32), direct.q.to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(fromfile.scale, direct.scale));
  // a stream built from the file holds the same weights as one that quantizes
  WeightStream a(*build(), torch::kCPU, {.fp8_base = true});
  auto m2 = build();
  WeightStream b(*m2, torch::kCPU, {.fp8_base = true, .fp8_codes = codes});
  b.gather(*m2->blocks[0]);
  EXPECT_TRUE(torch::equal(m2->blocks[0]->as<WanBlockImpl>()->self_attn->q->weight,
                           dequantize_weight_reference(direct, torch::kFloat32)));
  // another base's file: the key is named
  auto cfg = preset_config("tiny");
  cfg.num_layers = 3;
  auto bigger = WanDiT(cfg);
  for (auto& p : bigger->parameters()) p.requires_grad_(false);
  EXPECT_NE(error_of([&] { load_fp8_base(*bigger, path); }).find("blocks.2."), std::string::npos);
  EXPECT_NE(error_of([] { parse_base_dtype("fp16"); }).find("--base-dtype"), std::string::npos);
}

// On a GPU: the copies run on the side stream from pinned memory, and the gradients equal the resident model's (a CUDA
// backward is not bitwise deterministic: within float32 rounding).
TEST(WeightStream, CudaStreamedGradientsEqualResident) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  auto run = [](bool stream, bool fp8) {
    torch::manual_seed(0);
    auto cfg = preset_config("tiny");
    cfg.num_layers = 6;
    WanDiT m(cfg);
    m->init_random_base(5);
    LoraConfig lc;
    lc.rank = 2, lc.targets = m->lora_targets();
    auto lora = attach_lora(*m, lc, 3);
    {
      torch::NoGradGuard ng;
      for (auto& [n, p] : lora) p.normal_(0, 0.1);
    }
    m->to(torch::kCUDA);
    std::shared_ptr<WeightStream> ws;
    CheckpointOptions o;
    o.offload_inputs = true;
    if (stream || fp8) {
      ws = std::make_shared<WeightStream>(
          *m, torch::Device(torch::kCUDA),
          WeightStreamOptions{.streamed = stream ? streamed_block_indices(6, 4) : std::vector<int64_t>{},
                              .prefetch = 2,
                              .fp8_base = fp8});
      o.before = [ws](torch::nn::Module& b) { ws->gather(b); };
      o.after = [ws](torch::nn::Module& b) { ws->release(b); };
      EXPECT_EQ(ws->host_bytes() > 0, stream);
    }
    enable_block_checkpointing(*m, o);
    DenoiserInputs in;
    in.x = torch::randn({1, 16, 8, 8, 8}).cuda();
    in.t = torch::full({1, 8}, 500.0).cuda();
    in.context = torch::randn({1, 5, 64}).cuda();
    in.attention = AttentionPattern::block_causal(2);
    auto out = m->forward(in);
    (out * torch::linspace(-1, 1, out.numel(), out.options()).view_as(out)).sum().backward();
    std::map<std::string, torch::Tensor> g;
    for (auto& [n, p] : lora) g[n] = p.grad().cpu();
    g["out"] = out.detach().cpu();
    return g;
  };
  const auto resident = run(false, false), streamed = run(true, false);
  for (const auto& [k, v] : resident)
    EXPECT_LT((v - streamed.at(k)).abs().max().item<double>(), 1e-5 + 1e-4 * v.abs().max().item<double>()) << k;
  const auto fp8 = run(true, true), fp8_resident = run(false, true);
  for (const auto& [k, v] : fp8_resident)
    EXPECT_LT((v - fp8.at(k)).abs().max().item<double>(), 1e-5 + 1e-4 * v.abs().max().item<double>()) << k;
}

TEST(Fp8Base, CudaQuantizationAndDequantizationEqualTheCpuReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  torch::manual_seed(0);
  const auto w = (torch::randn({256, 512}) * torch::logspace(-4, 1, 256).unsqueeze(1)).to(torch::kBFloat16);
  const auto cpu = quantize_weight(w), gpu = quantize_weight(w.cuda());
  EXPECT_TRUE(torch::equal(cpu.q.to(torch::kFloat32), gpu.q.cpu().to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(cpu.scale, gpu.scale.cpu()));
  auto out = torch::empty({256, 512}, torch::dtype(torch::kBFloat16).device(torch::kCUDA));
  dequantize_weight_into(gpu.q, gpu.scale, out);
  EXPECT_TRUE(torch::equal(out.cpu(), dequantize_weight_reference(cpu, torch::kBFloat16)));
}

}  // namespace
}  // namespace vdt
