// Sharded frozen weights (dist/block_shards.h) with in-process ranks: each rank keeps about 1/world of a module's
// frozen bytes, gather() restores the weights bit for bit, release() empties them again, and trainable parameters
// (a LoRA's) are never touched.
#include <torch/torch.h>

#include <mutex>

#include "distributed/block_shards.h"
#include "distributed/local_group.h"
#include "model/lora.h"
#include "model/wan_dit.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(BlockShards, GatherRestoresTheWeightsAndReleaseFreesThem) {
  std::mutex mu;
  std::vector<int64_t> shard_bytes;
  run_local_ranks(3, [&](Communicator& comm) {
    WanDiT m(preset_config("tiny"));
    m->init_weights(7);
    LoraConfig lc;
    lc.rank = 2;
    attach_lora(*m, lc, 1);
    auto& block = *m->blocks[0]->as<WanBlockImpl>();
    std::map<std::string, torch::Tensor> before;
    for (const auto& kv : block.named_parameters()) before[kv.key()] = kv.value().detach().clone();
    BlockShards shards({&block}, comm);
    for (const auto& kv : block.named_parameters()) {
      const bool lora = kv.key().find("lora_") != std::string::npos;
      EXPECT_EQ(kv.value().numel(), lora ? before[kv.key()].numel() : 0) << kv.key();  // released: empty
    }
    shards.gather(block);
    shards.gather(block);  // idempotent
    for (const auto& kv : block.named_parameters()) EXPECT_TRUE(torch::equal(kv.value(), before[kv.key()])) << kv.key();
    shards.release(block);
    EXPECT_EQ(block.self_attn->q->weight.numel(), 0);
    std::lock_guard<std::mutex> lk(mu);
    shard_bytes.push_back(shards.shard_bytes());
    EXPECT_LE(shards.shard_bytes() * 3, shards.full_bytes() + 3 * 4 * 2);  // ~1/3 each (padding aside)
  });
  ASSERT_EQ(shard_bytes.size(), 3u);
  EXPECT_EQ(shard_bytes[0], shard_bytes[2]);
}

// With prefetch, a forward sweep then a backward sweep (the checkpoint order) binds the right weights every time, on
// every rank, and a sweep without prefetch agrees; so does one whose blocks 1 and 3 keep their shards in host memory
// (weight streaming of a sharded base).
TEST(BlockShards, PrefetchFollowsTheForwardAndBackwardSweeps) {
  for (int variant = 0; variant < 3; ++variant)
    run_local_ranks(2, [&](Communicator& comm) {
      const bool prefetch = variant != 1;
      const std::vector<int64_t> host = variant == 2 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{};
      ModelConfig mc = preset_config("tiny");
      mc.num_layers = 4;
      WanDiT m(mc);
      m->init_weights(11);
      for (auto& p : m->parameters()) p.set_requires_grad(false);  // a frozen base: what BlockShards shards
      std::vector<torch::nn::Module*> blocks;
      std::vector<torch::Tensor> ref;
      for (auto& b : *m->blocks) {
        blocks.push_back(b.get());
        ref.push_back(b->as<WanBlockImpl>()->ffn[0]->as<torch::nn::Linear>()->weight.detach().clone());
      }
      BlockShards shards(blocks, comm, prefetch, host);
      EXPECT_EQ(shards.host_bytes() > 0, !host.empty());
      EXPECT_LT(shards.host_bytes(), shards.shard_bytes());
      std::vector<int> sweep{0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3};
      for (int i : sweep) {
        shards.gather(*blocks[static_cast<size_t>(i)]);
        const auto& w = m->blocks[static_cast<size_t>(i)]->as<WanBlockImpl>()->ffn[0]->as<torch::nn::Linear>()->weight;
        EXPECT_TRUE(torch::equal(w, ref[static_cast<size_t>(i)])) << "block " << i << " prefetch " << prefetch;
        shards.release(*blocks[static_cast<size_t>(i)]);
      }
    });
}

}  // namespace
}  // namespace vdt
