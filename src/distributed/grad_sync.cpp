// The replicated update paths and the factory. One rank: TrainParams (optim/master_weights.h) + AdamW. Several ranks
// with replicated parameters: the same, with each gradient all-reduced in a fixed order as backward produces it.
#include "distributed/grad_sync.h"

#include <torch/torch.h>

#include "core/error.h"
#include "distributed/grad_hooks.h"
#include "distributed/zero2.h"
#include "optim/master_weights.h"

namespace vdt {
namespace {

class Replicated : public GradSync {
 public:
  Replicated(const NamedTensors& params, const GradSyncOptions& o) : params_(params, o.fp32_masters) {
    std::vector<AdamWGroup> groups;
    std::vector<int> owners(params.size(), 0);
    for (const auto& g : o.groups) {
      groups.push_back({g.name, params_.select(g.contains), g.lr, g.weight_decay, params_.select_names(g.contains)});
      for (size_t i = 0; i < params.size(); ++i) owners[i] += g.contains(params[i].first) ? 1 : 0;
    }
    for (size_t i = 0; i < params.size(); ++i)
      VDT_CHECK(owners[i] == 1, "update path: parameter '", params[i].first, "' is in ", owners[i],
                " optimizer groups (expected exactly one)");
    opt_ = std::make_unique<AdamW>(std::move(groups), o.adamw);
  }
  void attach(const NamedTensors& compute) override { params_.rebind(compute); }
  void after_backward() override { params_.accumulate_grads(); }
  torch::Tensor clip_grad_norm(double max_norm) override {
    auto norm = grad_norm(params_.all());
    clip_ = max_norm > 0 ? clip_coefficient(norm, max_norm) : torch::Tensor();
    return norm;
  }
  void step(const torch::Tensor& found_inf) override {
    opt_->step(found_inf, clip_);
    clip_ = torch::Tensor();
    params_.publish();
    opt_->zero_grad();
    params_.clear_compute_grads();
  }
  SyncState state() const override { return {params_.named(), opt_->state(), {}}; }
  void load(const FullTensorFn& full, int64_t optimizer_steps, const std::string& where) override {
    torch::NoGradGuard ng;
    for (auto& [name, t] : params_.named()) {
      const auto src = full("weight", name);
      VDT_CHECK(src.numel() == t.numel(), where, ": weight '", name, "' has ", src.numel(),
                " elements, the model needs ", t.sizes());
      t.copy_(src.reshape(t.sizes()));
    }
    const double steps = static_cast<double>(optimizer_steps);
    opt_->load_state(
        [&](const std::string& k) {
          const auto dot = k.find('.');
          const std::string kind = k.substr(0, dot), name = k.substr(dot + 1);
          return kind == "step" ? torch::full({}, steps) : full(kind, name);
        },
        where);
    params_.publish();
  }
  std::string describe() const override {
    return params_.has_masters() ? "replicated, fp32 master weights" : "replicated";
  }
  AdamW& optimizer() override { return *opt_; }

 protected:
  TrainParams params_;
  std::unique_ptr<AdamW> opt_;
  torch::Tensor clip_;  // the clip coefficient for the next step (undefined: none)
};

// Every rank holds the trainable parameters whole; each gradient is all-reduced as soon as backward has produced it
// (inside the checkpoint recompute of its block, so communication overlaps the rest of backward), one parameter per
// slot in reverse registration order. A parameter that got no gradient on this rank joins with zeros.
class ReplicatedOverRanks : public Replicated {
 public:
  ReplicatedOverRanks(const NamedTensors& params, const GradSyncOptions& o, Communicator& comm)
      : Replicated(params, o), comm_(comm), after_(o.reduce_after_backward) {}
  void attach(const NamedTensors& compute) override {
    Replicated::attach(compute);
    compute_.clear();
    for (const auto& [n, p] : compute) compute_.push_back(p);
    works_.assign(compute_.size(), nullptr);
    attached_ = true;
    if (after_) return;
    hooks_ = std::make_unique<GradHooks>(
        compute_, GradHooks::reverse_buckets(compute_, 0), [](size_t) {},
        [this](size_t slot) {
          // reverse_buckets(…, 0): slot k holds parameter n-1-k
          launch(compute_.size() - 1 - slot);
        });
  }
  void after_backward() override {
    VDT_CHECK(attached_, "update path: attach() was not called");
    torch::NoGradGuard ng;
    if (hooks_) {
      hooks_->flush();
    } else {
      for (size_t i = compute_.size(); i-- > 0;) launch(i);  // the hooks' order: reverse registration
    }
    for (size_t i = 0; i < compute_.size(); ++i) {
      works_[i]->wait();
      compute_[i].mutable_grad().div_(static_cast<double>(comm_.world()));
    }
    Replicated::after_backward();
  }
  std::string describe() const override {
    return "replicated over " + std::to_string(comm_.world()) + " ranks, gradients all-reduced " +
           (after_ ? "after backward" : "as backward produces them");
  }

 private:
  void launch(size_t i) {
    auto& p = compute_[i];
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    works_[i] = comm_.all_reduce(p.grad());
  }
  Communicator& comm_;
  const bool after_;
  bool attached_ = false;
  std::vector<torch::Tensor> compute_;
  std::vector<WorkPtr> works_;
  std::unique_ptr<GradHooks> hooks_;
};

}  // namespace

std::unique_ptr<GradSync> make_grad_sync(const NamedTensors& params, const GradSyncOptions& opts, Communicator& comm) {
  VDT_CHECK(!params.empty(), "update path: no trainable parameters");
  if (comm.world() == 1) return std::make_unique<Replicated>(params, opts);
  if (opts.shard_optimizer) return std::make_unique<Zero2>(params, opts, comm);
  return std::make_unique<ReplicatedOverRanks>(params, opts, comm);
}

}  // namespace vdt
