// `vdt train distill`'s flags and draws: the defaults are the published recipe's (ratio 5, AdamW (0, 0.999), wd 0.01,
// clip 10, EMA 0.99 from step 200, 4 steps), bad values are errors naming the flag, and the exit index and chunk
// count are equal on every rank (two in-process ranks compare every step's draws over a collective).
#include <torch/torch.h>

#include <set>

#include "distributed/local_group.h"
#include "test_util.h"
#include "train/distill/distill_config.h"
#include "train/distill/distill_draws.h"

namespace vdt {
namespace {

DistillConfig valid() {
  DistillConfig c;
  c.out = "/tmp/x", c.data_root = "/tmp/root", c.random_init = true;
  return c;
}

TEST(DistillConfig, DefaultsAreThePublishedRecipe) {
  const DistillConfig c;
  EXPECT_EQ(c.critic_ratio, 5);
  EXPECT_EQ(c.beta1, 0.0);
  EXPECT_EQ(c.beta2, 0.999);
  EXPECT_EQ(c.weight_decay, 0.01);
  EXPECT_EQ(c.grad_clip, 10.0);
  EXPECT_EQ(c.ema, 0.99);
  EXPECT_EQ(c.ema_start, 200);
  EXPECT_EQ(c.student_step_list(), (std::vector<int64_t>{1000, 750, 500, 250}));
  EXPECT_EQ(c.history_mode(), DistillConfig::History::detach);
  EXPECT_FALSE(c.all_causal);
  valid().validate();
}

// --init-lora none asks for a fresh student LoRA, as vdt train causal takes it; left out too.
TEST(DistillConfig, InitLoraNoneIsAFreshStudent) {
  DistillConfig c;
  EXPECT_EQ(c.init_lora_file(), "");
  c.init_lora = "none";
  EXPECT_EQ(c.init_lora_file(), "");
  c.init_lora = "run/lora_step01000.safetensors";
  EXPECT_EQ(c.init_lora_file(), "run/lora_step01000.safetensors");
}

TEST(DistillConfig, BadValuesNameTheirFlag) {
  auto bad = [](auto edit, std::initializer_list<std::string> words) {
    auto c = valid();
    edit(c);
    test::expect_error([&] { c.validate(); }, words);
  };
  bad([](DistillConfig& c) { c.student_steps = "1000,1000"; }, {"--student-steps", "decreasing"});
  bad([](DistillConfig& c) { c.student_steps = "1000,x"; }, {"--student-steps", "'x'"});
  bad([](DistillConfig& c) { c.history = "paper"; }, {"--history", "detach"});
  bad([](DistillConfig& c) { c.history = "released"; }, {"--history released", "not offered", "detach"});
  bad([](DistillConfig& c) { c.critic_ratio = 0; }, {"--critic-ratio"});
  bad([](DistillConfig& c) { c.min_chunks = 9; }, {"--min-chunks"});
  bad([](DistillConfig& c) { c.ema = 1.0; }, {"--ema"});
  bad([](DistillConfig& c) { c.random_init = false; }, {"--weights", "--random-init"});
  bad([](DistillConfig& c) { c.compute.precision = "mixed"; }, {"--precision"});
}

TEST(DistillDraws, ExitIndexAndChunksAreEqualOnEveryRankAndCoverTheirRange) {
  constexpr int64_t kSteps = 64;
  std::vector<std::vector<int64_t>> seen(2);
  run_local_ranks(2, [&](Communicator& comm) {
    auto mine = torch::zeros({kSteps, 2}, torch::kInt64), all = torch::zeros({2 * kSteps * 2}, torch::kInt64);
    for (int64_t s = 0; s < kSteps; ++s) {
      const auto d = draw_distill(11, s + 1, comm.rank(), 4, 3, 7, 5.0);
      mine[s][0] = d.exit_index, mine[s][1] = d.chunks;
    }
    comm.all_gather(all, mine.flatten())->wait();
    const auto both = all.view({2, kSteps, 2});
    EXPECT_TRUE(torch::equal(both[0], both[1]));
    auto& v = seen[static_cast<size_t>(comm.rank())];
    for (int64_t s = 0; s < kSteps; ++s) v.push_back(mine[s][0].item<int64_t>() * 100 + mine[s][1].item<int64_t>());
  });
  std::set<int64_t> exits, chunks;
  for (const auto v : seen[0]) exits.insert(v / 100), chunks.insert(v % 100);
  EXPECT_EQ(exits, (std::set<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(chunks, (std::set<int64_t>{3, 4, 5, 6, 7}));
  // The timesteps are the rank's own (each rank scores its own samples), in the clamped range.
  const auto a = draw_distill(11, 5, 0, 4, 6, 6, 5.0), b = draw_distill(11, 5, 1, 4, 6, 6, 5.0);
  EXPECT_NE(a.dmd_timestep, b.dmd_timestep);
  EXPECT_NE(a.dmd_timestep, a.critic_timestep);
  for (const auto t : {a.dmd_timestep, a.critic_timestep, b.dmd_timestep}) EXPECT_TRUE(t >= 20 && t <= 980) << t;
  EXPECT_EQ(a.chunks, 6);
}

}  // namespace
}  // namespace vdt
