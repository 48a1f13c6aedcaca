#include "dist/block_shards.h"

#include <torch/torch.h>

#include <map>

#include "core/error.h"

namespace vdt {

BlockShards::BlockShards(std::vector<torch::nn::Module*> modules, Communicator& comm) : comm_(comm) {
  const int64_t world = comm.world(), rank = comm.rank();
  torch::NoGradGuard ng;
  for (auto* m : modules) {
    std::map<torch::ScalarType, Flat> by_dtype;
    for (auto& p : m->parameters())
      if (!p.requires_grad()) {
        auto& f = by_dtype[p.scalar_type()];
        f.params.push_back(p);
        f.shapes.push_back(p.sizes().vec());
        f.numel += p.numel();
      }
    Entry e;
    for (auto& [dtype, f] : by_dtype) {
      f.padded = (f.numel + world - 1) / world * world;
      const int64_t n = f.padded / world;
      auto full = torch::zeros({f.padded}, f.params.front().options());  // [padded]
      int64_t at = 0;
      for (auto& p : f.params) full.narrow(0, at, p.numel()).copy_(p.reshape(-1)), at += p.numel();
      f.shard = full.narrow(0, rank * n, n).clone();  // [padded / world]
      shard_bytes_ += f.shard.numel() * f.shard.element_size();
      full_bytes_ += f.numel * f.shard.element_size();
      e.flats.push_back(std::move(f));
    }
    e.gathered = true;
    entries_.emplace(m, std::move(e));
    release(*m);
  }
}

BlockShards::Entry& BlockShards::entry(const torch::nn::Module& m) {
  auto it = entries_.find(&m);
  VDT_CHECK(it != entries_.end(), "BlockShards: module '", m.name(), "' is not sharded");
  return it->second;
}

void BlockShards::gather(const torch::nn::Module& m) {
  auto& e = entry(m);
  if (e.gathered) return;
  torch::NoGradGuard ng;
  for (auto& f : e.flats) {
    auto full = torch::empty({f.padded}, f.shard.options());  // [padded]
    comm_.all_gather(full, f.shard)->wait();
    int64_t at = 0;
    for (size_t i = 0; i < f.params.size(); ++i) {
      const auto& shape = f.shapes[i];
      const int64_t n = c10::multiply_integers(shape);
      f.params[i].set_data(full.narrow(0, at, n).view(shape));
      at += n;
    }
  }
  e.gathered = true;
}

void BlockShards::release(const torch::nn::Module& m) {
  auto& e = entry(m);
  if (!e.gathered) return;
  for (auto& f : e.flats)
    for (auto& p : f.params) p.set_data(torch::empty({0}, f.shard.options()));
  e.gathered = false;
}

}  // namespace vdt
