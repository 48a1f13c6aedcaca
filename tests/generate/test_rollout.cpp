// The rollout with autograd (generate/rollout.h) on tiny and h3-tiny (text prefix, Picture 1, chunks with audio rows),
// CPU float32: a chunk made through the KV-cache stream, two of its steps with autograd, gives the clean prediction
// and the gradients of the same chunk computed without a cache (generate/recompute_stream.h) when the history keeps
// its graph; with block checkpointing on and the history detached, the gradient with respect to the chunk's noise is
// still the recompute's and the LoRA's gradients are those without checkpointing. A commit inside checkpointed blocks
// and a window under a history with gradients are refused naming the fix; a few-step student's step list is checked.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/rng.h"
#include "diffusion/forcing.h"
#include "distributed/activation_checkpoint.h"
#include "generate/recompute_stream.h"
#include "generate/rollout.h"
#include "model/denoiser_registry.h"
#include "model/lora.h"
#include "test_util.h"
#include "generate/model_inputs.h"

namespace vdt {
namespace {

// A random frozen base with a rank-4 LoRA whose B is not zero, and a stream's geometry and conditions.
struct Fixture {
  std::shared_ptr<Denoiser> model;
  StreamSpec spec;
  int64_t cf = 1;
};

Fixture make_fixture(const std::string& preset) {
  Fixture f;
  f.model = make_denoiser(preset, torch::TensorOptions().dtype(torch::kFloat32));
  f.model->init_random_base(7);
  LoraConfig lc;
  lc.rank = 4, lc.alpha = 4, lc.targets = f.model->lora_targets();
  attach_lora(*f.model, lc, 3);
  auto gen = make_generator(torch::kCPU, 11);
  {
    torch::NoGradGuard ng;
    for (auto& p : f.model->named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().copy_(torch::randn(p.value().sizes(), gen) * 0.05);
  }
  const bool h3 = f.model->family() == "h3";
  f.cf = h3 ? 5 : 1;
  auto& s = f.spec;
  s.chunk_frames = f.cf, s.height = h3 ? 4 : 8, s.width = s.height, s.chunks = 3;
  const int64_t Lt = h3 ? 12 : 16, C = f.model->latent_channels();
  s.context = torch::randn({1, Lt, f.model->text_dim()}, gen);
  s.prefix_ids = torch::zeros({1}, torch::kLong);
  if (h3) {
    s.extra["picture1"] = torch::randn({1, C, 1, s.height, s.width}, gen);
    s.extra["picture1.noise"] = torch::randn({1, C, 1, s.height, s.width}, gen);
    s.extra["text_tags"] = torch::ones({1, Lt}, torch::kLong);
    s.side_streams = f.model->side_streams();
  }
  return f;
}

ChunkInputsFn inputs_of(const Fixture& f) {
  return [&f](int64_t, const SampleState& x, const torch::Tensor& t) {
    auto in = model_inputs(*f.model, x.video, t, f.spec.context, torch::zeros({1, f.cf}, torch::kLong), {},
                           AttentionPattern::block_causal(f.cf));
    for (const auto& [name, s] : x.side) {
      in.extra[name] = s;
      in.extra[name + ".t"] = stream_timesteps(t, {0, s.size(-1)}, f.cf);
    }
    return in;
  };
}

// Chunk n's noise (video and the side streams' steps of the chunk), the same for every run.
SampleState chunk_noise(const Fixture& f, KvStream& stream, int64_t n) {
  auto gen = make_generator(torch::kCPU, 100 + static_cast<uint64_t>(n));
  SampleState s{torch::randn({1, f.model->latent_channels(), f.cf, f.spec.height, f.spec.width}, gen), {}};
  for (const auto& name : f.spec.side_streams) {
    const auto [j0, j1] = stream.side_steps(name, n);
    auto shape = f.model->side_stream_step_shape(name);
    shape.insert(shape.begin(), 1);
    shape.push_back(j1 - j0);
    s.side[name] = torch::randn(shape, gen);
  }
  return s;
}

struct GradRun {
  SampleState x0;            // chunk 2's clean prediction
  torch::Tensor noise_grad;  // d loss / d chunk 2's video noise
  std::vector<torch::Tensor> lora_grads;
};

// Chunks 0 and 1 made and committed (with autograd on: a history that keeps its graph keeps theirs), then chunk 2
// from its noise with steps 0 and 1 of 3 under autograd, stopped after step 1; loss = a fixed projection of its x0.
GradRun grad_run(Fixture& f, bool cache, bool keep_graph, bool checkpoint) {
  if (checkpoint)
    enable_block_checkpointing(*f.model);
  else
    f.model->set_block_runner({});
  f.model->zero_grad();
  StreamSpec spec = f.spec;
  spec.keep_history_graph = keep_graph;
  std::unique_ptr<KvStream> stream =
      cache ? f.model->open_stream(spec) : std::make_unique<RecomputeStream>(*f.model, spec);
  EulerConfig ec;
  ec.steps = 3;
  RolloutConfig rc;
  rc.grid = rollout_grid(ec);
  Rollout rollout({std::move(stream), inputs_of(f)}, {}, rc);
  for (int64_t n = 0; n < 2; ++n) rollout.commit(rollout.run_chunk(chunk_noise(f, rollout.stream(), n)).x);
  auto noise = chunk_noise(f, rollout.stream(), 2);
  noise.video.requires_grad_(true);
  ChunkPlan plan;
  plan.grad_steps = {0, 1}, plan.last_step = 1;
  const auto r = rollout.run_chunk(noise, plan);
  auto gen = make_generator(torch::kCPU, 99);
  auto loss = (r.x0.video * torch::randn(r.x0.video.sizes(), gen)).sum();
  for (const auto& [name, s] : r.x0.side) loss = loss + (s * torch::randn(s.sizes(), gen)).sum();
  loss.backward();
  GradRun out;
  for (const auto& [name, s] : r.x0.side) out.x0.side[name] = s.detach();
  out.x0.video = r.x0.video.detach();
  out.noise_grad = noise.video.grad().clone();
  for (auto& p : f.model->named_parameters())
    if (p.value().requires_grad())
      out.lora_grads.push_back(p.value().grad().defined() ? p.value().grad().clone() : torch::zeros_like(p.value()));
  f.model->set_block_runner({});
  return out;
}

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-12);
}

double max_rel_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, rel_diff(a[i], b[i]));
  return d;
}

double total_norm(const std::vector<torch::Tensor>& g) {
  double n = 0;
  for (const auto& t : g) n += t.pow(2).sum().item<double>();
  return std::sqrt(n);
}

void expect_gradients_match_the_recompute(const std::string& preset) {
  auto f = make_fixture(preset);
  const auto ref = grad_run(f, /*cache=*/false, /*keep_graph=*/true, /*checkpoint=*/false);
  ASSERT_GT(total_norm(ref.lora_grads), 1e-6);
  ASSERT_GT(ref.noise_grad.abs().max().item<double>(), 1e-6);

  // The history in the graph: everything is the recompute's.
  const auto kept = grad_run(f, true, true, false);
  EXPECT_LE(rel_diff(kept.x0.video, ref.x0.video), 1e-5);
  for (const auto& [name, s] : ref.x0.side) EXPECT_LE(rel_diff(kept.x0.side.at(name), s), 1e-5) << name;
  EXPECT_LE(rel_diff(kept.noise_grad, ref.noise_grad), 1e-4);
  EXPECT_LE(max_rel_diff(kept.lora_grads, ref.lora_grads), 1e-4);

  // Detached history, block checkpointing on: the chunk's own gradient is the recompute's; the LoRA's gradients are
  // those of the same rollout without checkpointing, and miss the history's part (so they differ from the above).
  const auto ckpt = grad_run(f, true, false, true);
  const auto plain = grad_run(f, true, false, false);
  EXPECT_LE(rel_diff(ckpt.x0.video, ref.x0.video), 1e-5);
  EXPECT_LE(rel_diff(ckpt.noise_grad, ref.noise_grad), 1e-4);
  EXPECT_LE(max_rel_diff(ckpt.lora_grads, plain.lora_grads), 1e-5);
  EXPECT_GT(total_norm(ckpt.lora_grads), 1e-6);
  EXPECT_GT(max_rel_diff(ckpt.lora_grads, ref.lora_grads), 1e-3);
}

TEST(Rollout, WanChunkWithGradientsEqualsTheChunkWithoutTheCache) { expect_gradients_match_the_recompute("tiny"); }

TEST(Rollout, H3ChunkWithGradientsEqualsTheChunkWithoutTheCache) { expect_gradients_match_the_recompute("h3-tiny"); }

// Sampling is the rollout without autograd: over the recompute stream it gives the KV-cache stream's chunks, guided.
TEST(Rollout, SamplingOverTheCacheEqualsSamplingOverTheRecompute) {
  auto f = make_fixture("tiny");
  torch::NoGradGuard ng;
  auto sample = [&](bool cache) {
    auto open = [&](int64_t row) -> RolloutBranch {
      StreamSpec s = f.spec;
      s.prefix_ids = torch::full({1}, row, torch::kLong);
      s.context = torch::cat({f.spec.context, torch::zeros_like(f.spec.context)});  // row 1: the null text
      std::unique_ptr<KvStream> st = cache ? f.model->open_stream(s) : std::make_unique<RecomputeStream>(*f.model, s);
      return {std::move(st), [&f, s, row](int64_t, const SampleState& x, const torch::Tensor& t) {
                return model_inputs(*f.model, x.video, t, s.context, torch::full({1, f.cf}, row, torch::kLong), {},
                                    AttentionPattern::block_causal(f.cf));
              }};
    };
    EulerConfig ec;
    ec.steps = 3, ec.cfg_scale = 3;
    RolloutConfig rc;
    rc.grid = rollout_grid(ec), rc.cfg_scale = 3;
    Rollout rollout(open(0), open(1), rc);
    std::vector<torch::Tensor> chunks;
    sample_stream(
        rollout, 3, [&](int64_t n) { return chunk_noise(f, rollout.stream(), n); }, {},
        [&](int64_t, const SampleState& c) { chunks.push_back(c.video); });
    return torch::cat(chunks, 2);
  };
  const auto kv = sample(true), re = sample(false);
  EXPECT_LE((kv - re).abs().max().item<double>(), 1e-5);
  EXPECT_GT(re.abs().max().item<double>(), 0.1);
}

// A few-step student's sampler (sample_stream with step noise): each step's clean prediction noised afresh to the next
// level, (1 - sigma') x0 + sigma' noise; the last step's clean prediction is the chunk. Checked against the steps
// evaluated one by one, and against Euler steps on the same grid (which differ).
TEST(Rollout, AStudentsSamplerNoisesEachCleanPredictionAfresh) {
  auto f = make_fixture("tiny");
  torch::NoGradGuard ng;
  RolloutConfig rc;
  rc.grid = rollout_grid({}, {1000, 750, 500});
  Rollout rollout({f.model->open_stream(f.spec), inputs_of(f)}, {}, rc);
  const auto noise = chunk_noise(f, rollout.stream(), 0);
  auto step_noise = [&](int64_t n, int64_t k) {
    SampleState s;
    s.video = torch::randn_like(noise.video, torch::Generator(at::detail::createCPUGenerator(100 * n + k)));
    return s;
  };
  SampleState x = noise;  // by hand: predict, then mix with the step's noise at the next level
  for (int64_t k = 0; k < 3; ++k) {
    const auto p = rollout.predict(x, k, false, false);
    if (k == 2) {
      x = p.x0;
      break;
    }
    const double next = rc.grid.sigmas[k + 1].item<double>();
    x.video = (1 - next) * p.x0.video + next * step_noise(0, k).video;
  }
  std::vector<torch::Tensor> got;
  auto keep = [&](int64_t, const SampleState& c) { got.push_back(c.video); };
  sample_stream(
      rollout, 1, [&](int64_t) { return noise; }, {}, keep, /*commit_last=*/true, {}, step_noise);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LE((got[0] - x.video).abs().max().item<double>(), 1e-6);
  Rollout euler({f.model->open_stream(f.spec), inputs_of(f)}, {}, rc);
  sample_stream(
      euler, 1, [&](int64_t) { return noise; }, {}, keep);
  EXPECT_GT((got[1] - got[0]).abs().max().item<double>(), 1e-3);
}

// A commit that keeps its graph cannot run inside checkpointed blocks (their forward runs without autograd and is
// recomputed later); a window cannot drop chunks of a history with gradients; a step list must decrease in (0, 1000].
TEST(Rollout, RefusesWhatCannotKeepAGraphAndBadStepLists) {
  auto f = make_fixture("tiny");
  enable_block_checkpointing(*f.model);
  StreamSpec spec = f.spec;
  spec.keep_history_graph = true;
  EulerConfig ec;
  ec.steps = 2;
  RolloutConfig rc;
  rc.grid = rollout_grid(ec);
  Rollout rollout({f.model->open_stream(spec), inputs_of(f)}, {}, rc);
  const auto chunk = rollout.run_chunk(chunk_noise(f, rollout.stream(), 0)).x;
  test::expect_error([&] { rollout.commit(chunk); }, {"block checkpointing", "detached history"});
  f.model->set_block_runner({});
  spec.chunks = 9, spec.window = 2;
  test::expect_error([&] { f.model->open_stream(spec); }, {"history with gradients", "--window 2"});
  test::expect_error([&] { rollout_grid(ec, {1000, 1000}); }, {"must decrease"});
  test::expect_error([&] { rollout_grid(ec, {1200, 500}); }, {"1200", "(0, 1000]"});
  const auto g = rollout_grid(ec, {1000, 937.5, 833.3, 625});
  EXPECT_EQ(g.sigmas.size(0), 4);
  EXPECT_NEAR(g.sigmas[1].item<double>(), 0.9375, 1e-7);
}

}  // namespace
}  // namespace vdt
