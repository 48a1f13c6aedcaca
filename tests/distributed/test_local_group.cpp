// In-process ranks: every collective against its definition, bitwise-equal results on every rank, and a failing rank
// that aborts the others instead of hanging them; a world split into nodes.
#include <torch/torch.h>

#include <mutex>

#include "distributed/communicator.h"
#include "distributed/local_group.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(LocalRanks, CollectivesMatchTheirDefinitions) {
  const int W = 3;
  std::mutex mu;
  std::vector<torch::Tensor> reduced(W), scattered(W), gathered(W), broadcast(W);
  run_local_ranks(W, [&](Communicator& c) {
    const int r = c.rank();
    auto a = torch::full({4}, static_cast<float>(r + 1));
    c.all_reduce(a)->wait();
    auto in = torch::arange(W * 2, torch::kFloat32) * (r + 1);  // [6]
    auto out = torch::empty({2});
    c.reduce_scatter(out, in)->wait();
    auto g = torch::empty({W * 2});
    c.all_gather(g, torch::full({2}, static_cast<float>(r)))->wait();
    auto b = torch::full({2}, static_cast<float>(r * 10));
    c.broadcast(b, 1)->wait();
    auto m = torch::full({1}, static_cast<float>(r));
    c.all_reduce(m, ReduceOp::Max)->wait();
    EXPECT_EQ(m.item<float>(), W - 1);
    c.barrier();
    std::lock_guard<std::mutex> lk(mu);
    reduced[r] = a, scattered[r] = out, gathered[r] = g, broadcast[r] = b;
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_TRUE(torch::equal(reduced[r], torch::full({4}, 6.0f)));  // 1 + 2 + 3
    // Sum over ranks of arange * (rank + 1) = arange * 6; rank r keeps elements [2r, 2r + 2).
    EXPECT_TRUE(torch::equal(scattered[r], torch::arange(2 * r, 2 * r + 2, torch::kFloat32) * 6));
    EXPECT_TRUE(torch::equal(gathered[r], torch::tensor({0.f, 0.f, 1.f, 1.f, 2.f, 2.f})));
    EXPECT_TRUE(torch::equal(broadcast[r], torch::full({2}, 10.0f)));
  }
}

TEST(LocalRanks, AFailingRankAbortsTheOthersAndItsErrorIsRethrown) {
  test::expect_error(
      [] {
        run_local_ranks(2, [](Communicator& c) {
          if (c.rank() == 1) throw std::runtime_error("rank 1 broke");
          auto t = torch::ones({1});
          c.all_reduce(t)->wait();  // would wait forever for rank 1
        });
      },
      {"rank 1 broke"});
}

// Two nodes of two: split(local_world) gives each rank its node, whose collectives see only that node's ranks, while
// the world's still see all four; a rank that fails inside its node's collective aborts the other node too.
TEST(LocalRanks, SplitGivesEachRankItsNode) {
  std::mutex mu;
  std::vector<float> node_sum(4), world_sum(4);
  std::vector<int> node_rank(4), node_world(4);
  run_local_ranks(
      4,
      [&](Communicator& c) {
        EXPECT_EQ(c.local_world(), 2);
        auto node = c.split(c.local_world());
        auto t = torch::full({1}, static_cast<float>(c.rank() + 1));
        node->all_reduce(t)->wait();
        auto w = torch::full({1}, static_cast<float>(c.rank() + 1));
        c.all_reduce(w)->wait();
        std::lock_guard<std::mutex> lk(mu);
        node_sum[c.rank()] = t.item<float>(), world_sum[c.rank()] = w.item<float>();
        node_rank[c.rank()] = node->rank(), node_world[c.rank()] = node->world();
      },
      /*local_world=*/2);
  EXPECT_EQ(node_sum, (std::vector<float>{3, 3, 7, 7}));  // 1 + 2 on node 0, 3 + 4 on node 1
  EXPECT_EQ(world_sum, (std::vector<float>{10, 10, 10, 10}));
  EXPECT_EQ(node_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(node_world, (std::vector<int>{2, 2, 2, 2}));
  test::expect_error([] { run_local_ranks(4, [](Communicator& c) { c.split(3); }); }, {"groups of 3", "world of 4"});
  test::expect_error(
      [] {
        run_local_ranks(
            4, [](Communicator&) {}, 3);
      },
      {"3 ranks per node", "world of 4"});
  test::expect_error(
      [] {
        run_local_ranks(
            4,
            [](Communicator& c) {
              auto node = c.split(2);
              if (c.rank() == 3) throw std::runtime_error("rank 3 broke");
              auto t = torch::ones({1});
              node->all_reduce(t)->wait();  // rank 2 would wait forever for rank 3
            },
            2);
      },
      {"rank 3 broke"});
}

TEST(LaunchEnv, ReadsTorchrunAndRejectsBadValues) {
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "2", 1);
  ::setenv("LOCAL_RANK", "0", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "node7", 1);
  ::setenv("MASTER_PORT", "29611", 1);
  auto e = LaunchEnv::from_env();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world, 4);
  EXPECT_EQ(e.local_world, 2);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 29611);
  ::setenv("RANK", "x", 1);
  test::expect_error([] { LaunchEnv::from_env(); }, {"RANK", "'x'"});
  ::setenv("RANK", "5", 1);
  test::expect_error([] { LaunchEnv::from_env(); }, {"rank 5", "world size 4"});
  for (const char* v : {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) ::unsetenv(v);
  ::setenv("SLURM_NTASKS", "8", 1);
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_LOCALID", "3", 1);
  ::setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
  e = LaunchEnv::from_env();
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.local_world, 4);
  for (const char* v :
       {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "MASTER_ADDR", "MASTER_PORT"})
    ::unsetenv(v);
  EXPECT_EQ(LaunchEnv::from_env().world, 1);
  EXPECT_NO_THROW(make_communicator(LaunchEnv{}, torch::kCPU));
}

}  // namespace
}  // namespace vdt
