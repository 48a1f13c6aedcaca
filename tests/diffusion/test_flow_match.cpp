#include <torch/torch.h>

#include "core/safetensors.h"
#include "diffusion/flow_match.h"
#include "test_util.h"

namespace vdt {
namespace {

double max_abs(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(FlowMatch, GridsAndWeightsMatchReferenceFixture) {
  auto f = SafetensorsFile::open(test::fixture("flow_match_wan.safetensors"));
  const auto grid = training_grid();
  EXPECT_LT(max_abs(grid.timesteps, f->get("train.timesteps")), 1e-4);
  EXPECT_LT(max_abs(grid.sigmas, f->get("train.sigmas")), 1e-7);
  const auto w = training_weights(grid);
  EXPECT_LT(max_abs(w, f->get("train.weights")), 1e-5);
  EXPECT_NEAR(w.mean().item<double>(), 1.0, 1e-5);
  const auto g50 = inference_grid(50, 5.0);
  EXPECT_LT(max_abs(g50.timesteps, f->get("infer50.timesteps")), 1e-4);
  EXPECT_LT(max_abs(g50.sigmas, f->get("infer50.sigmas")), 1e-7);
  const auto g30 = inference_grid(30, 3.0, 0.7);
  EXPECT_LT(max_abs(g30.timesteps, f->get("infer30_strength0.7_shift3.timesteps")), 1e-4);
  EXPECT_LT(max_abs(g30.sigmas, f->get("infer30_strength0.7_shift3.sigmas")), 1e-7);
}

// MiniMax-H3 trains on its own grid (DiffSynth's set_timesteps_minimax_h3, shift 2.22) with the bell weights over
// that grid: w ~ 1.692 at t ~ 500.5 where the Wan grid's weight at the same t is 2.076.
TEST(FlowMatch, EachFamilyHasItsOwnGridAndH3MatchesItsReferenceFixture) {
  auto f = SafetensorsFile::open(test::fixture("flow_match_h3.safetensors"));
  const auto& h3 = flow_schedule("h3");
  EXPECT_EQ(h3.train_shift, 2.22);
  EXPECT_EQ(std::string(h3.reference), f->metadata().at("template"));
  const auto grid = training_grid(1000, h3.train_shift);
  EXPECT_LT(max_abs(grid.timesteps, f->get("train.timesteps")), 1e-4);
  EXPECT_LT(max_abs(grid.sigmas, f->get("train.sigmas")), 1e-7);
  const auto w = training_weights(grid);
  EXPECT_LT(max_abs(w, f->get("train.weights")), 1e-5);
  const int64_t mid = nearest_index(grid, 500.0);
  EXPECT_NEAR(grid.timesteps[mid].item<double>(), 500.5, 0.1);
  EXPECT_NEAR(w[mid].item<double>(), 1.692, 1e-3);
  EXPECT_NEAR(w[nearest_index(grid, 200.0)].item<double>(), 0.982, 1e-3);
  const auto video = inference_grid(50, h3.sample_shift);
  EXPECT_LT(max_abs(video.timesteps, f->get("infer50_video_shift12.timesteps")), 1e-4);
  EXPECT_LT(max_abs(video.sigmas, f->get("infer50_video_shift12.sigmas")), 1e-7);
  const auto audio = inference_grid(50, 3.0);
  EXPECT_LT(max_abs(audio.sigmas, f->get("infer50_audio_shift3.sigmas")), 1e-7);
  // Wan keeps shift 5 (its own fixture: GridsAndWeightsMatchReferenceFixture), so the same t weighs more there.
  const auto& wan = flow_schedule("wan");
  EXPECT_EQ(wan.train_shift, 5.0);
  EXPECT_EQ(wan.sample_shift, 5.0);
  const auto wan_grid = training_grid(1000, wan.train_shift);
  EXPECT_NEAR(training_weights(wan_grid)[nearest_index(wan_grid, 500.0)].item<double>(), 2.076, 1e-2);
  // The timestep rule is per family: Wan rounds the model's input to the compute dtype, H3 keeps float32.
  EXPECT_TRUE(wan.round_model_timestep);
  EXPECT_FALSE(h3.round_model_timestep);
  test::expect_error([] { flow_schedule("flux"); }, {"flux", "wan, h3"});
}

// docs/design.md §1 and the Python trainer (GcTrainModule.forward): sigma, the noise mixing and the weight come from
// the exact float32 grid value; only the model's input timestep is rounded to the compute dtype.
TEST(FlowMatch, SftExampleTakesSigmaAndWeightFromTheExactGridPointAndRoundsOnlyTheModelTimestep) {
  const auto grid = training_grid();
  const auto w = training_weights(grid);
  auto x0 = torch::randn({1, 4, 3, 2, 2}), noise = torch::randn({1, 4, 3, 2, 2});
  // id 10: t = 997.98, which bf16 rounds to 996 (the nearest grid point of 996 would be id 20).
  auto ex = make_sft_example(x0, noise, 10, grid, w, torch::kBFloat16, true);
  EXPECT_EQ(ex.timestep, grid.timesteps[10].item<double>());
  EXPECT_EQ(ex.model_timestep, 996.0);
  EXPECT_EQ(ex.sigma, grid.sigmas[10].item<double>());
  EXPECT_EQ(ex.weight, w[10].item<double>());
  EXPECT_TRUE(torch::equal(ex.x_t.select(2, 0), x0.select(2, 0)));
  EXPECT_EQ(ex.t[0][0].item<float>(), 0.0f);
  EXPECT_EQ(ex.t[0][2].item<float>(), 996.0f);
  EXPECT_LT(max_abs(ex.x_t.slice(2, 1), (1 - ex.sigma) * x0.slice(2, 1) + ex.sigma * noise.slice(2, 1)), 1e-6);
  EXPECT_TRUE(torch::equal(ex.target, noise - x0));
  // Ids 1..9 keep their small positive weights (the bf16 rounding to 1000 used to give them 0).
  for (int id = 1; id < 10; ++id) {
    const auto e = make_sft_example(x0, noise, id, grid, w, torch::kBFloat16, true);
    EXPECT_GT(e.weight, 0.0) << id;
    EXPECT_EQ(e.weight, w[id].item<double>()) << id;
    EXPECT_EQ(e.model_timestep, 1000.0) << id;
  }
  // Every grid index: sigma and weight are that index's, whatever the compute dtype.
  for (int id = 0; id < 1000; id += 7) {
    const auto e = make_sft_example(x0, noise, id, grid, w, torch::kBFloat16, true);
    ASSERT_EQ(e.sigma, grid.sigmas[id].item<double>()) << id;
    ASSERT_EQ(e.weight, w[id].item<double>()) << id;
  }
  // In float32 the model timestep is the grid value itself.
  const auto f32 = make_sft_example(x0, noise, 10, grid, w, torch::kFloat32, true);
  EXPECT_EQ(f32.model_timestep, f32.timestep);
  EXPECT_NEAR(f32.timestep, 997.98, 0.01);
}

// On bf16 latents the noise mixing takes sigma at float32 (the Python trainer's scheduler.add_noise with the float32
// sigmas[id] on a GPU): each product x0 * (1 - sigma), noise * sigma is computed in float32 and rounded to bf16 once,
// then the two are added. Rounding sigma to bf16 first moves the (1 - sigma) coefficient by up to 2e-3.
TEST(FlowMatch, SftNoisingOnBf16LatentsKeepsSigmaInFloat32) {
  const auto grid = training_grid();
  const auto w = training_weights(grid);
  // The grid index whose sigma bf16 rounds the most.
  const auto err = (grid.sigmas.to(torch::kBFloat16).to(torch::kFloat32) - grid.sigmas).abs();
  const int64_t id = err.argmax().item<int64_t>();
  ASSERT_GT(err[id].item<double>(), 1.5e-3);
  torch::manual_seed(3);
  const auto x0 = (4 * torch::randn({1, 4, 5, 8, 8})).to(torch::kBFloat16);
  const auto noise = torch::randn({1, 4, 5, 8, 8}).to(torch::kBFloat16);
  const auto ex = make_sft_example(x0, noise, id, grid, w, torch::kBFloat16, true);
  ASSERT_EQ(ex.x_t.scalar_type(), torch::kBFloat16);

  // The reference, step by step in float32: the float32 sigma and 1 - sigma, two products, two roundings, one add.
  const auto s32 = grid.sigmas[id];
  const auto c32 = 1 - s32;
  auto mix = [&](const torch::Tensor& sigma, const torch::Tensor& keep) {
    const auto a = (x0.to(torch::kFloat32) * keep).to(torch::kBFloat16);
    const auto b = (noise.to(torch::kFloat32) * sigma).to(torch::kBFloat16);
    return (a.to(torch::kFloat32) + b.to(torch::kFloat32)).to(torch::kBFloat16).slice(2, 1);
  };
  const auto want = mix(s32, c32);
  EXPECT_TRUE(torch::equal(ex.x_t.slice(2, 1), want))
      << max_abs(ex.x_t.slice(2, 1).to(torch::kFloat32), want.to(torch::kFloat32));
  EXPECT_TRUE(torch::equal(ex.x_t.select(2, 0), x0.select(2, 0)));
  // The same mixing with sigma rounded to bf16 first lands elsewhere on a good share of the elements.
  const auto s16 = s32.to(torch::kBFloat16);
  const auto rounded = mix(s16.to(torch::kFloat32), (1 - s16).to(torch::kFloat32));
  EXPECT_GT(rounded.ne(want).to(torch::kFloat32).mean().item<double>(), 0.1);
}

// The Python trainer's --no-first_frame_cond only gives frame 0 the drawn timestep: x_t[:, :, 0] = x0 and the loss over
// frames 1.. hold either way.
TEST(FlowMatch, NoFirstFrameCondOnlyChangesFrameZerosModelTimestep) {
  const auto grid = training_grid();
  const auto w = training_weights(grid);
  auto x0 = torch::randn({2, 4, 3, 2, 2}), noise = torch::randn({2, 4, 3, 2, 2});
  const auto on = make_sft_example(x0, noise, 500, grid, w, torch::kBFloat16, true);
  const auto off = make_sft_example(x0, noise, 500, grid, w, torch::kBFloat16, false);
  EXPECT_TRUE(torch::equal(off.x_t, on.x_t));
  EXPECT_TRUE(torch::equal(off.x_t.select(2, 0), x0.select(2, 0)));
  EXPECT_TRUE(torch::equal(off.target, on.target));
  EXPECT_EQ(off.sigma, on.sigma);
  EXPECT_EQ(off.weight, on.weight);
  EXPECT_EQ(on.t[1][0].item<float>(), 0.0f);
  EXPECT_EQ(off.t[1][0].item<double>(), off.model_timestep);
  EXPECT_TRUE(torch::equal(off.t.slice(1, 1), on.t.slice(1, 1)));
}

TEST(FlowMatch, MseSkipsFrameZeroUnderFirstFrameConditioning) {
  auto p = torch::zeros({1, 2, 3, 2, 2}), t = torch::zeros({1, 2, 3, 2, 2});
  t.select(2, 0).fill_(10);
  EXPECT_EQ(flow_mse(p, t, true).item<double>(), 0.0);
  EXPECT_NEAR(flow_mse(p, t, false).item<double>(), 100.0 / 3, 1e-4);
}

}  // namespace
}  // namespace vdt
