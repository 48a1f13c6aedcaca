// ZeRO-2. Gradients arrive in the bucket in master dtype; a bucket's reduce-scatter output is averaged (divided by
// the world size) and added to this rank's gradient slice, which AdamW reads as the masters' .grad.
#include "distributed/zero2.h"

#include <torch/torch.h>

#include <map>

#include "core/error.h"
#include "distributed/grad_hooks.h"

namespace vdt {

struct Zero2::Bucket {
  int group = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> compute;  // the model parameters (after attach)
  std::vector<int64_t> offsets, numels;
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0, padded = 0, slice = 0;
  torch::Tensor master, grad;  // this rank's slice [slice]
  // per micro batch
  torch::Tensor flat, out;  // full bucket gradient, reduce-scatter output
  WorkPtr work;
};

Zero2::Zero2(const NamedTensors& params, const GradSyncOptions& opts, Communicator& comm) : comm_(comm) {
  torch::NoGradGuard ng;
  const auto& groups = opts.groups;
  const int64_t bucket_numel = opts.bucket_numel;
  const auto master_dtype = opts.fp32_masters ? torch::kFloat32 : params.front().second.scalar_type();
  for (const auto& [name, p] : params) {
    int owners = 0;
    for (const auto& g : groups) owners += g.contains(name) ? 1 : 0;
    VDT_CHECK(owners == 1, "ZeRO-2: parameter '", name, "' is in ", owners, " optimizer groups (expected exactly one)");
  }
  const int64_t W = comm.world(), r = comm.rank();
  std::vector<AdamWGroup> ogroups;
  for (size_t g = 0; g < groups.size(); ++g) {
    // Reverse registration order approximates the order in which backward produces gradients.
    std::vector<size_t> idx;
    for (size_t i = params.size(); i-- > 0;)
      if (groups[g].contains(params[i].first)) idx.push_back(i);
    AdamWGroup og{groups[g].name, {}, groups[g].lr, groups[g].weight_decay, {}};
    for (size_t a = 0; a < idx.size();) {
      auto b = std::make_unique<Bucket>();
      b->group = static_cast<int>(g);
      while (a < idx.size() && (b->numel == 0 || b->numel + params[idx[a]].second.numel() <= bucket_numel)) {
        const auto& [name, p] = params[idx[a++]];
        b->names.push_back(name);
        b->offsets.push_back(b->numel);
        b->numels.push_back(p.numel());
        b->shapes.push_back(p.sizes().vec());
        b->numel += p.numel();
      }
      b->padded = (b->numel + W - 1) / W * W;
      b->slice = b->padded / W;
      // This rank's slice of the initial weights.
      std::vector<torch::Tensor> parts;
      for (size_t j = 0; j < b->names.size(); ++j) {
        const auto& p = params[idx[a - b->names.size() + j]].second;
        parts.push_back(p.detach().reshape({-1}).to(master_dtype));
      }
      auto full = torch::cat(parts);
      full = torch::constant_pad_nd(full, {0, b->padded - b->numel});
      b->master = full.narrow(0, r * b->slice, b->slice).clone();
      b->grad = torch::zeros_like(b->master);
      og.params.push_back(b->master);
      og.names.push_back("bucket" + std::to_string(buckets_.size()));
      buckets_.push_back(std::move(b));
    }
    ogroups.push_back(std::move(og));
  }
  opt_ = std::make_unique<AdamW>(std::move(ogroups), opts.adamw);
}

Zero2::~Zero2() = default;

void Zero2::attach(const NamedTensors& compute) {
  std::map<std::string, torch::Tensor> by_name(compute.begin(), compute.end());
  std::vector<torch::Tensor> params;
  std::vector<std::vector<size_t>> slots;
  slot_of_.clear();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    auto& b = *buckets_[k];
    b.compute.clear();
    slots.emplace_back();
    for (size_t j = 0; j < b.names.size(); ++j) {
      auto it = by_name.find(b.names[j]);
      VDT_CHECK(it != by_name.end(), "ZeRO-2: parameter '", b.names[j], "' is not in the model");
      b.compute.push_back(it->second);
      slots.back().push_back(params.size());
      slot_of_.emplace_back(k, j);
      params.push_back(it->second);
    }
  }
  hooks_ = std::make_unique<GradHooks>(
      std::move(params), std::move(slots), [this](size_t i) { on_grad(i); }, [this](size_t k) { launch(k); });
}

void Zero2::on_grad(size_t i) {
  torch::NoGradGuard ng;
  const auto [k, j] = slot_of_[i];
  auto& b = *buckets_[k];
  auto& p = b.compute[j];
  if (!b.flat.defined()) b.flat = torch::zeros({b.padded}, b.master.options());
  b.flat.narrow(0, b.offsets[j], b.numels[j]).add_(p.grad().reshape({-1}));
  p.mutable_grad() = torch::Tensor();  // free the compute-dtype gradient at once
}

void Zero2::launch(size_t k) {
  auto& b = *buckets_[k];
  if (!b.flat.defined()) b.flat = torch::zeros({b.padded}, b.master.options());  // no parameter got a gradient
  b.out = torch::empty({b.slice}, b.master.options());
  b.work = comm_.reduce_scatter(b.out, b.flat);
}

void Zero2::after_backward() {
  VDT_CHECK(hooks_ != nullptr, "ZeRO-2: attach() was not called");
  torch::NoGradGuard ng;
  hooks_->flush();
  const double inv = 1.0 / comm_.world();
  for (auto& bp : buckets_) {
    auto& b = *bp;
    b.work->wait();
    b.grad.add_(b.out, inv);
    b.flat = b.out = torch::Tensor();
    b.work.reset();
  }
}

torch::Tensor Zero2::clip_grad_norm(double max_norm) {
  torch::NoGradGuard ng;
  auto sq = torch::zeros({1}, buckets_.front()->grad.options().dtype(torch::kFloat32));
  for (auto& b : buckets_) sq += b->grad.to(torch::kFloat32).pow(2).sum();
  comm_.all_reduce(sq)->wait();
  auto total = sq.sqrt().squeeze();
  clip_ = max_norm > 0 ? clip_coefficient(total, max_norm) : torch::Tensor();  // applied by step()'s AdamW
  return total;
}

void Zero2::step(const torch::Tensor& found_inf) {
  torch::NoGradGuard ng;
  for (auto& b : buckets_) b->master.mutable_grad() = b->grad;
  opt_->step(found_inf, clip_);
  clip_ = torch::Tensor();
  for (auto& b : buckets_) {
    b->master.mutable_grad() = torch::Tensor();
    b->grad.zero_();
  }
  publish();
}

void Zero2::publish() {
  torch::NoGradGuard ng;
  for (auto& bp : buckets_) {
    auto& b = *bp;
    const auto dt = b.compute.front().scalar_type();
    auto local = b.master.to(dt);
    auto full = torch::empty({b.padded}, local.options());
    comm_.all_gather(full, local)->wait();
    for (size_t j = 0; j < b.names.size(); ++j)
      b.compute[j].copy_(full.narrow(0, b.offsets[j], b.numels[j]).view(b.compute[j].sizes()));
  }
}

SyncState Zero2::state() const {
  SyncState s;
  for (size_t k = 0; k < buckets_.size(); ++k)
    s.weights.emplace_back("master.bucket" + std::to_string(k), buckets_[k]->master);
  s.optimizer = opt_->state();
  s.meta["zero2_layout"] = layout().dump();
  return s;
}

std::string Zero2::describe() const {
  return "ZeRO-2 over " + std::to_string(comm_.world()) + " ranks, " + std::to_string(buckets_.size()) + " buckets";
}

nlohmann::ordered_json Zero2::layout() const {
  nlohmann::ordered_json bs = nlohmann::ordered_json::array();
  for (const auto& b : buckets_) {
    nlohmann::ordered_json ps = nlohmann::ordered_json::array();
    for (size_t j = 0; j < b->names.size(); ++j) ps.push_back({b->names[j], b->offsets[j], b->numels[j]});
    bs.push_back({{"group", b->group}, {"numel", b->numel}, {"padded", b->padded}, {"params", ps}});
  }
  return {{"world", comm_.world()}, {"rank", comm_.rank()}, {"buckets", bs}};
}

void Zero2::load(const FullTensorFn& full, int64_t step, const std::string& where) {
  torch::NoGradGuard ng;
  const int64_t r = comm_.rank();
  auto& groups = opt_->groups();
  size_t k = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params.size(); ++i, ++k) {
      auto& b = *buckets_[k];
      for (auto [kind, dst] : {std::pair{std::string("weight"), b.master},
                               {"exp_avg", opt_->mutable_exp_avg()[g][i]},
                               {"exp_avg_sq", opt_->mutable_exp_avg_sq()[g][i]}}) {
        std::vector<torch::Tensor> parts;
        for (size_t j = 0; j < b.names.size(); ++j) {
          auto t = full(kind, b.names[j]);
          VDT_CHECK(t.numel() == b.numels[j], where, ": ", kind, " of '", b.names[j], "' has ", t.numel(),
                    " elements, the model's parameter ", b.numels[j]);
          parts.push_back(t.reshape({-1}).to(dst.device(), dst.scalar_type()));
        }
        auto flat = torch::constant_pad_nd(torch::cat(parts), {0, b.padded - b.numel});
        dst.copy_(flat.narrow(0, r * b.slice, b.slice));
      }
    }
  opt_->set_steps_taken(step);
  publish();
}

}  // namespace vdt
