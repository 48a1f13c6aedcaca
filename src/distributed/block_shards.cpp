#include "distributed/block_shards.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace vdt {

BlockShards::BlockShards(std::vector<torch::nn::Module*> modules, Communicator& comm, bool prefetch,
                         const std::vector<int64_t>& host_blocks)
    : comm_(comm), prefetch_(prefetch) {
  const int64_t world = comm.world(), rank = comm.rank();
  torch::NoGradGuard ng;
  for (auto* m : modules) {
    const int64_t index = static_cast<int64_t>(order_.size());
    const bool on_host = std::find(host_blocks.begin(), host_blocks.end(), index) != host_blocks.end();
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
      f.device = full.device();
      if (on_host) {  // pinned for asynchronous copies on a GPU; on the CPU a copy apart all the same
        f.shard = f.shard.to(torch::kCPU).clone();
        if (f.device.is_cuda()) f.shard = f.shard.pin_memory();
        host_bytes_ += f.shard.numel() * f.shard.element_size();
      }
      shard_bytes_ += f.shard.numel() * f.shard.element_size();
      full_bytes_ += f.numel * f.shard.element_size();
      e.flats.push_back(std::move(f));
    }
    e.gathered = true;
    e.index = static_cast<int64_t>(order_.size());
    order_.push_back(&entries_.emplace(m, std::move(e)).first->second);
    release(*m);
  }
}

BlockShards::Entry& BlockShards::entry(const torch::nn::Module& m) {
  auto it = entries_.find(&m);
  VDT_CHECK(it != entries_.end(), "BlockShards: module '", m.name(), "' is not sharded");
  return it->second;
}

BlockShards::Pending BlockShards::start_gather(int64_t index) {
  Pending p;
  p.index = index;
  for (auto& f : order_[static_cast<size_t>(index)]->flats) {
    // a streamed shard comes to the device first, in the current stream's order (the all-gather waits on it)
    const auto shard = f.shard.device() == f.device ? f.shard : f.shard.to(f.device, /*non_blocking=*/true);
    p.full.push_back(torch::empty({f.padded}, shard.options()));  // [padded]
    p.works.push_back(comm_.all_gather(p.full.back(), shard));
  }
  return p;
}

void BlockShards::bind(Entry& e, Pending& p) {
  for (size_t k = 0; k < e.flats.size(); ++k) {
    p.works[k]->wait();
    auto& f = e.flats[k];
    int64_t at = 0;
    for (size_t i = 0; i < f.params.size(); ++i) {
      const auto& shape = f.shapes[i];
      const int64_t n = c10::multiply_integers(shape);
      f.params[i].set_data(p.full[k].narrow(0, at, n).view(shape));
      at += n;
    }
  }
  e.gathered = true;
}

void BlockShards::gather(const torch::nn::Module& m) {
  auto& e = entry(m);
  if (e.gathered) return;
  torch::NoGradGuard ng;
  Pending p;
  if (pending_.index == e.index) {
    p = std::move(pending_);
    pending_ = Pending();
  } else {
    p = start_gather(e.index);
  }
  bind(e, p);
  // Prefetch the next module in the direction of travel (up from the first, down from the last).
  const int64_t n = static_cast<int64_t>(order_.size()), i = e.index;
  int64_t next = -1;
  if (i == 0 || (last_ < i && i < n - 1)) {
    next = i + 1;
  } else if (i == n - 1 || last_ > i) {
    next = i - 1;
  }
  last_ = i;
  if (!prefetch_ || next < 0 || next >= n || order_[static_cast<size_t>(next)]->gathered || pending_.index == next)
    return;
  if (pending_.index >= 0)
    for (auto& w : pending_.works) w->wait();  // an unused prefetch: let it finish before its buffer goes
  pending_ = start_gather(next);
}

void BlockShards::release(const torch::nn::Module& m) {
  auto& e = entry(m);
  if (!e.gathered) return;
  for (auto& f : e.flats)
    for (auto& p : f.params) p.set_data(torch::empty({0}, f.shard.options().device(f.device).pinned_memory(false)));
  e.gathered = false;
}

}  // namespace vdt
