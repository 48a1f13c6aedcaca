// DMD's pieces: the student's steps on the shifted grid (Self-Forcing's printed 1000, 937.5, 833.3, 625), the clamped
// DMD timestep, the student loss whose gradient is exactly grad / N on a hand-made case (and with a sample whose
// normaliser is zero), and the critic loss equal to the flow-matching loss of the velocity it came from.
#include <torch/torch.h>

#include "diffusion/dmd.h"
#include "diffusion/flow_match.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(Dmd, StudentStepsMapOntoTheShiftedGrid) {
  const auto t = student_timesteps({1000, 750, 500, 250}, 5.0);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_NEAR(t[0], 1000.0, 1e-3);
  EXPECT_NEAR(t[1], 937.5, 1e-3);
  EXPECT_NEAR(t[2], 833.333, 1e-2);
  EXPECT_NEAR(t[3], 625.0, 1e-3);
  const auto unshifted = student_timesteps({1000, 500}, 1.0);
  EXPECT_NEAR(unshifted[1], 500.0, 1e-3);
  EXPECT_THROW(student_timesteps({750, 1000}, 5.0), std::exception);  // not decreasing
  EXPECT_THROW(student_timesteps({1000, 0}, 5.0), std::exception);    // 0 is the clean level, not a step
  EXPECT_THROW(student_timesteps({}, 5.0), std::exception);
}

TEST(Dmd, TimestepIsShiftedAndClamped) {
  EXPECT_NEAR(dmd_timestep(0.0, 5.0), 20.0, 1e-9);      // randint 0 -> clamped up to 20
  EXPECT_NEAR(dmd_timestep(0.9999, 5.0), 980.0, 1e-9);  // 999 shifted is ~999.8 -> clamped down to 980
  EXPECT_NEAR(dmd_timestep(0.5, 5.0), 1000.0 * 2.5 / 3.0, 1e-9);
  EXPECT_NEAR(dmd_timestep(0.5004, 1.0), 500.0, 1e-9);  // an integer point of the clock
}

TEST(Dmd, StudentGradientIsTheDmdGradientOverN) {
  // Two samples of 4 values. Sample 0: x - teacher = (1, -1, 2, 0) -> mean |.| = 1; critic - teacher = (2, 0, -4, 1)
  // -> grad (2, 0, -4, 1). Sample 1: x equals the teacher (normaliser 0): its grad is dropped, not infinite.
  auto x = torch::tensor({1.0, -1.0, 2.0, 0.0, 3.0, 3.0, 3.0, 3.0}, torch::kFloat32).view({2, 1, 4});
  const auto teacher = torch::tensor({0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 3.0, 3.0}).view({2, 1, 4});
  const auto critic = torch::tensor({2.0, 0.0, -4.0, 1.0, 5.0, 5.0, 5.0, 5.0}).view({2, 1, 4});
  x.set_requires_grad(true);
  const auto d = dmd_loss(x, critic, teacher);
  const auto want = torch::tensor({2.0, 0.0, -4.0, 1.0, 0.0, 0.0, 0.0, 0.0}, torch::kFloat64).view({2, 1, 4});
  EXPECT_TRUE(torch::equal(d.grad, want)) << d.grad;
  EXPECT_NEAR(d.grad_norm.item<double>(), std::sqrt(21.0), 1e-12);
  EXPECT_NEAR(d.loss.item<double>(), 0.5 * 21.0 / 8.0, 1e-12);  // 0.5 mean(grad^2)
  d.loss.backward();
  EXPECT_TRUE(torch::allclose(x.grad().to(torch::kFloat64), want / 8.0, 0, 1e-7)) << x.grad();
  // A per-sample normaliser: scaling sample 0's distance to the teacher by 2 halves its gradient.
  auto x2 = (x.detach() * 2).set_requires_grad(true);
  const auto d2 = dmd_loss(x2, critic, teacher);
  EXPECT_NEAR(d2.grad[0][0][0].item<double>(), 1.0, 1e-12);
}

TEST(Dmd, CriticLossIsTheFlowMatchingLoss) {
  torch::manual_seed(3);
  const auto x = torch::randn({2, 4, 3, 2, 2}), noise = torch::randn_like(x), v = torch::randn_like(x);
  const double sigma = 0.37;
  const auto x_t = add_noise(x, noise, torch::tensor(sigma));
  const auto loss = critic_flow_loss(x_t, x0_from_velocity(x_t, v, sigma), x, noise, sigma);
  const auto ref = flow_mse(v, velocity_target(x, noise), /*skip_first_frame=*/false);
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-5 * ref.item<double>());
  // Gradients reach the critic's prediction, not the student's output.
  auto v2 = v.clone().set_requires_grad(true);
  auto xs = x.clone().set_requires_grad(true);
  critic_flow_loss(x_t, x0_from_velocity(x_t, v2, sigma), xs, noise, sigma).backward();
  EXPECT_TRUE(v2.grad().defined());
  EXPECT_FALSE(xs.grad().defined());
}

TEST(Dmd, GuidanceIsUncondPlusScaleTimesTheDifference) {
  const auto c = torch::tensor({1.0f, 2.0f}), u = torch::tensor({0.0f, 4.0f});
  EXPECT_TRUE(torch::allclose(guided(c, u, 3.0), torch::tensor({3.0f, -2.0f})));
  EXPECT_TRUE(torch::equal(guided(c, u, 1.0), c));
  EXPECT_TRUE(torch::equal(guided(c, {}, 3.0), c));
}

}  // namespace
}  // namespace vdt
