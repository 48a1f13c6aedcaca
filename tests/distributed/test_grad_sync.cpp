// The update path (distributed/grad_sync.h), each implementation against plain AdamW on one rank, on a small
// parameter list: every rank computes the gradient of its share of the data, the path synchronises, clips and steps,
// and the weights must equal one AdamW on the mean gradient (to float32 rounding of the reduction order). Plus the
// fixed launch order of the gradient hooks, the skipped step on a non-finite loss and the state round trip.
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "distributed/grad_hooks.h"
#include "distributed/grad_sync.h"
#include "distributed/local_group.h"
#include "test_util.h"

namespace vdt {
namespace {

// Three parameters: a [6, 5] matrix, a [6] bias and a [3, 6] matrix; loss = mean((W2 tanh(W1 x + b))^2 - y).
NamedTensors make_params() {
  auto gen = at::detail::createCPUGenerator(7);  // not the global generator: ranks are threads
  return {{"layer.weight", torch::randn({6, 5}, gen) * 0.5},
          {"layer.bias", torch::randn({6}, gen) * 0.1},
          {"head.weight", torch::randn({3, 6}, gen) * 0.5}};
}

NamedTensors trainable_copy(const NamedTensors& p) {
  NamedTensors out;
  for (const auto& [n, t] : p) out.emplace_back(n, t.clone().set_requires_grad(true));
  return out;
}

torch::Tensor data_x(int64_t step) {
  return torch::randn({8, 5}, torch::Generator(at::detail::createCPUGenerator(100 + step)));
}

torch::Tensor loss_of(const NamedTensors& p, const torch::Tensor& x) {
  auto h = torch::tanh(torch::nn::functional::linear(x, p[0].second, p[1].second));
  return torch::nn::functional::linear(h, p[2].second).pow(2).mean();
}

GradSyncOptions options(bool shard, bool after = false) {
  GradSyncOptions o;
  o.groups = {{"layer", [](const std::string& n) { return n.rfind("layer.", 0) == 0; }, 1e-2, 0.01},
              {"head", [](const std::string& n) { return n.rfind("head.", 0) == 0; }, 3e-2, 0.0}};
  o.adamw.state_dtype = torch::kFloat32;
  o.shard_optimizer = shard, o.reduce_after_backward = after;
  o.bucket_numel = 20;  // several buckets per group
  return o;
}

// Plain AdamW on one rank over the whole batch, clipped at `clip`: the reference weights after `steps`.
NamedTensors reference(int64_t steps, double clip, std::vector<double>* norms) {
  auto p = trainable_copy(make_params());
  const auto o = options(false);
  AdamWConfig ac = o.adamw;
  ac.fused = false;  // the per-tensor reference update
  AdamW opt({{"layer", {p[0].second, p[1].second}, 1e-2, 0.01, {p[0].first, p[1].first}},
             {"head", {p[2].second}, 3e-2, 0.0, {p[2].first}}},
            ac);
  for (int64_t s = 0; s < steps; ++s) {
    loss_of(p, data_x(s)).backward();
    norms->push_back(clip_grad_norm({p[0].second, p[1].second, p[2].second}, clip).item<double>());
    opt.step();
    opt.zero_grad();
  }
  return p;
}

// `world` ranks, each with rows [rank*8/world, (rank+1)*8/world) of every batch, through make_grad_sync.
std::vector<NamedTensors> run_sync(int world, bool shard, int64_t steps, double clip, std::vector<double>* norms,
                                   std::vector<std::string>* described = nullptr, bool after = false) {
  std::vector<NamedTensors> out(static_cast<size_t>(world));
  std::mutex mu;
  run_local_ranks(world, [&](Communicator& comm) {
    auto p = trainable_copy(make_params());
    auto sync = make_grad_sync(p, options(shard, after), comm);
    sync->attach(p);
    const int64_t n = 8 / world;
    for (int64_t s = 0; s < steps; ++s) {
      auto x = data_x(s).narrow(0, comm.rank() * n, n);
      loss_of(p, x).backward();
      sync->after_backward();
      auto norm = sync->clip_grad_norm(clip);
      sync->step(torch::zeros({}));
      std::lock_guard<std::mutex> lk(mu);
      if (comm.rank() == 0) norms->push_back(norm.item<double>());
    }
    std::lock_guard<std::mutex> lk(mu);
    out[static_cast<size_t>(comm.rank())] = p;
    if (described && comm.rank() == 0) described->push_back(sync->describe());
  });
  return out;
}

void expect_close(const NamedTensors& got, const NamedTensors& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LT((got[i].second - want[i].second).norm().item<double>() / want[i].second.norm().item<double>(), tol)
        << got[i].first;
}

struct Case {
  int world;
  bool shard;
  const char* expect;  // in describe()
  bool after = false;  // GradSyncOptions::reduce_after_backward
};

TEST(GradSync, EveryImplementationMatchesPlainAdamW) {
  std::vector<double> ref_norms;
  const auto ref = reference(5, 0.05, &ref_norms);  // a low clip: clipping acts on every step
  for (const auto& c : {Case{1, false, "replicated"}, Case{1, true, "replicated"}, Case{2, true, "ZeRO-2"},
                        Case{4, true, "ZeRO-2"}, Case{2, false, "replicated over 2"},
                        Case{4, false, "replicated over 4"}, Case{2, false, "all-reduced after backward", true}}) {
    SCOPED_TRACE(std::to_string(c.world) + " ranks, shard " + std::to_string(c.shard));
    std::vector<double> norms;
    std::vector<std::string> described;
    const auto ranks = run_sync(c.world, c.shard, 5, 0.05, &norms, &described, c.after);
    EXPECT_NE(described.at(0).find(c.expect), std::string::npos) << described[0];
    for (const auto& r : ranks) expect_close(r, ref, 1e-5);
    for (size_t r = 1; r < ranks.size(); ++r)  // identical on every rank, bit for bit
      for (size_t i = 0; i < ranks[r].size(); ++i) EXPECT_TRUE(torch::equal(ranks[r][i].second, ranks[0][i].second));
    ASSERT_EQ(norms.size(), ref_norms.size());
    for (size_t s = 0; s < norms.size(); ++s)
      EXPECT_NEAR(norms[s], ref_norms[s], 1e-5 * ref_norms[s])
          << "step " << s << " " << norms[s] << " vs " << ref_norms[s];
  }
}

TEST(GradSync, FoundInfSkipsTheUpdateAndClearsGradients) {
  for (int world : {1, 2}) {
    run_local_ranks(world, [&](Communicator& comm) {
      auto p = trainable_copy(make_params());
      auto sync = make_grad_sync(p, options(world > 1), comm);
      sync->attach(p);
      const auto before = p[0].second.detach().clone();
      loss_of(p, data_x(0)).backward();
      sync->after_backward();
      sync->clip_grad_norm(1.0);
      sync->step(torch::ones({}));
      EXPECT_TRUE(torch::equal(p[0].second, before));
      for (const auto& [n, t] : p) EXPECT_FALSE(t.grad().defined()) << n;
    });
  }
}

TEST(GradSync, ReplicatedStateContinuesOnZero2Ranks) {
  // Two steps on one replicated rank; its state (per-parameter tensors) loaded into two ZeRO-2 ranks, a third step
  // there: the weights equal three steps of plain AdamW.
  std::map<std::string, torch::Tensor> full;  // "kind/name"
  auto single = make_single_rank();
  auto q = trainable_copy(make_params());
  auto sync1 = make_grad_sync(q, options(false), *single);
  sync1->attach(q);
  for (int64_t s = 0; s < 2; ++s) {
    loss_of(q, data_x(s)).backward();
    sync1->after_backward();
    sync1->clip_grad_norm(0.05);
    sync1->step(torch::zeros({}));
  }
  const auto st = sync1->state();
  for (const auto& [n, t] : st.weights) full["weight/" + n] = t.detach().clone();
  for (const auto& [k, t] : st.optimizer) {
    const auto dot = k.find('.');
    full[k.substr(0, dot) + "/" + k.substr(dot + 1)] = t.clone();
  }
  std::vector<double> ref_norms;
  const auto ref = reference(3, 0.05, &ref_norms);
  run_local_ranks(2, [&](Communicator& comm) {
    auto r = trainable_copy(make_params());
    auto sync2 = make_grad_sync(r, options(true), comm);
    sync2->attach(r);
    sync2->load([&](const std::string& kind, const std::string& name) { return full.at(kind + "/" + name); }, 2,
                "test state");
    for (const auto& [n, t] : r) EXPECT_TRUE(torch::equal(t, full.at("weight/" + n))) << n;
    loss_of(r, data_x(2).narrow(0, comm.rank() * 4, 4)).backward();
    sync2->after_backward();
    sync2->clip_grad_norm(0.05);
    sync2->step(torch::zeros({}));
    expect_close(r, ref, 1e-5);
  });
  // A state missing a moment is an error naming it.
  auto s = trainable_copy(make_params());
  auto sync3 = make_grad_sync(s, options(false), *single);
  test::expect_error(
      [&] {
        sync3->load(
            [&](const std::string& kind, const std::string& name) {
              return kind == "exp_avg_sq" ? torch::Tensor() : full.at(kind + "/" + name);
            },
            2, "the slot");
      },
      {"the slot", "exp_avg_sq.layer.weight", "missing"});
}

TEST(GradHooks, LaunchesInSlotOrderWhateverTheGradientOrder) {
  std::vector<torch::Tensor> p = {torch::ones({2}, torch::requires_grad()), torch::ones({3}, torch::requires_grad()),
                                  torch::ones({4}, torch::requires_grad())};
  std::vector<size_t> grads, launches;
  GradHooks hooks(
      p, {{2}, {0, 1}}, [&](size_t i) { grads.push_back(i); }, [&](size_t k) { launches.push_back(k); });
  // Backward produces p0 first, then p1 and p2: slot 1 ({0, 1}) is complete before slot 0 ({2}) but must wait for it.
  (p[0].sum() * 3).backward();
  EXPECT_TRUE(launches.empty());
  (p[1].sum() * 2).backward();
  EXPECT_TRUE(launches.empty()) << "slot 1 launched before slot 0";
  (p[2].sum()).backward();
  EXPECT_EQ(launches, (std::vector<size_t>{0, 1}));
  hooks.flush();
  EXPECT_EQ(hooks.launch_order(), (std::vector<size_t>{0, 1}));
  // A backward that reaches only p0: flush launches both slots, in order.
  launches.clear();
  for (auto& t : p) t.mutable_grad() = torch::Tensor();
  p[0].sum().backward();
  hooks.flush();
  EXPECT_EQ(launches, (std::vector<size_t>{0, 1}));
  // Reverse buckets: the last parameters first, cut at the element budget.
  EXPECT_EQ(GradHooks::reverse_buckets(p, 4), (std::vector<std::vector<size_t>>{{2}, {1}, {0}}));
  EXPECT_EQ(GradHooks::reverse_buckets(p, 7), (std::vector<std::vector<size_t>>{{2, 1}, {0}}));
}

}  // namespace
}  // namespace vdt
