// The checkpoint is a torch::autograd::Function whose differentiable inputs are the block call's inputs (passed as a
// TensorList: LibTorch counts a std::vector argument as one non-variable); the call
// (its block and its run function, which holds everything else the block needs) and the options travel as opaque
// pointers: the call is copied to the heap in forward and freed after its recompute in backward. Blocks are
// deterministic (no dropout), so the recomputation needs no RNG state.
// Selective: forward runs the block with a Recorder installed (model/kept_ops.h): each GEMM's output is kept, each
// attention runs with grad on detached copies of its inputs so its graph (q, k, v, output, softmax statistics) is
// kept. The recompute runs with a Replayer: a GEMM returns its kept output through CachedLinear (backward: dgrad, and
// wgrad only for a weight that needs one), an attention through KeptAttentionFn (backward: the kept graph's). So the
// recompute costs the elementwise work only, and the calls must come in the same order (checked).
// --attn-keep: a block that recomputes whole runs its forward with a RangedAttentionKeep recording and its recompute
// with it replaying, so the kept query blocks' attention forward runs once.
// offload_inputs (CUDA): HostOffload copies each block's residual input (and, with --attn-keep, its kept attention
// outputs) to pinned host memory on a side stream, and in backward brings back those of the block before (in forward
// order) on that stream while this block's backward runs: neither copy waits in the compute stream's queue (on it
// they cost ~60 ms a 1.3B causal step). Stream-generic c10 calls (c10::Event, c10::StreamGuard), so this file needs no
// CUDA header and builds on a CPU-only LibTorch.
#include "distributed/activation_checkpoint.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "model/kept_ops.h"
#include "model/kernels/bias_grad.h"
#include "model/ranged_attention.h"

namespace vdt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The tensors one runner offloaded (each block's residual input and, with --attn-keep, its kept attention outputs), in
// forward order, by block (a group: blocks run forward in order and backward in reverse).
class HostOffload {
 public:
  struct Entry {
    explicit Entry(c10::DeviceType t) : copied(t) {}
    torch::Tensor host;    // x's shape, pinned
    torch::Tensor device;  // the copy back, once started (undefined before, and after get took it)
    c10::Device where{c10::kCPU};
    c10::Event copied;  // recorded on the side stream after this entry's last copy
    int64_t group = 0;  // the block call it belongs to (new_group)
  };

  int64_t new_group() { return ++groups_; }  // one per block call, in forward order

  // x on a CUDA device -> its entry in `group`: the copy to the host runs on the side stream after what the current
  // stream has queued (x is made), and x's memory is not reused before it ends.
  std::shared_ptr<Entry> put(const torch::Tensor& x, int64_t group) {
    std::lock_guard<std::mutex> lock(mu_);
    c10::impl::VirtualGuardImpl g(x.device().type());
    const auto cur = g.getStream(x.device()), side = side_stream(x.device());
    auto e = std::make_shared<Entry>(x.device().type());
    e->where = x.device(), e->group = group;
    e->host = torch::empty(x.sizes(), x.options().device(torch::kCPU).pinned_memory(true));
    c10::Event made(x.device().type());
    made.record(cur);
    made.block(side);
    {
      c10::StreamGuard on_side(side);
      e->host.copy_(x, /*non_blocking=*/true);
    }
    x.record_stream(side);
    e->copied.record(side);
    std::erase_if(order_, [](const auto& w) { return w.expired(); });
    order_.push_back(e);
    return e;
  }

  // e's tensor back on its device, ready for the current stream; starts bringing back the rest of e's group (the
  // block's other entries, taken during its recompute) and the group before it (the next block backward runs).
  torch::Tensor get(const std::shared_ptr<Entry>& e) {
    std::lock_guard<std::mutex> lock(mu_);
    c10::impl::VirtualGuardImpl g(e->where.type());
    const auto cur = g.getStream(e->where);
    if (!e->device.defined()) fetch(*e);
    e->copied.block(cur);
    auto x = std::move(e->device);
    x.record_stream(cur);  // made on the side stream, used on this one
    std::erase_if(order_, [&](const auto& w) { return w.expired() || w.lock() == e; });
    int64_t before = 0;  // the group before e's: the latest still here
    for (const auto& w : order_)
      if (auto p = w.lock(); p && p->group < e->group) before = std::max(before, p->group);
    for (const auto& w : order_)
      if (auto p = w.lock(); p && (p->group == e->group || p->group == before) && !p->device.defined()) fetch(*p);
    return x;
  }

 private:
  c10::Stream side_stream(const c10::Device& d) {
    if (!side_ || side_->device() != d)
      side_ = c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d, /*isHighPriority=*/false);
    return *side_;
  }
  void fetch(Entry& e) {  // on the side stream, after the copy to the host (the same stream)
    const auto side = side_stream(e.where);
    c10::StreamGuard on_side(side);
    e.device = e.host.to(e.where, /*non_blocking=*/true);
    e.copied.record(side);
  }

  std::mutex mu_;
  std::vector<std::weak_ptr<Entry>> order_;
  std::optional<c10::Stream> side_;
  int64_t groups_ = 0;
};

struct KeptAttention {
  torch::Tensor out;                  // with its graph, rooted at `leaves`
  std::vector<torch::Tensor> leaves;  // detached copies of the attention's inputs
};

// What one block's selective forward kept, in call order.
struct KeptRecord {
  std::vector<torch::Tensor> linears;
  std::vector<KeptAttention> attentions;
};

// A block call on the heap between forward and backward, with what its forward kept (selective only).
struct HeldCall {
  BlockCall call;
  KeptRecord record;
  bool selective = false;                          // this block keeps its GEMM and attention outputs
  std::unique_ptr<RangedAttentionKeep> attention;  // --attn-keep, in a block that recomputes whole
  std::shared_ptr<HostOffload::Entry> offloaded;   // offload_inputs: the residual input on the host
};

class Recorder : public KeptOps {
 public:
  explicit Recorder(KeptRecord* r) : r_(r) {}
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, GemmRole role,
                       InputAct act) override {
    auto y = role == GemmRole::base ? base_linear(x, w, b, act)  // grad mode is off here
                                    : torch::linear(input_act(x, act), w, b);
    r_->linears.push_back(y);
    return y;
  }
  torch::Tensor attention(const std::vector<torch::Tensor>& inputs, const AttentionFn& fn) override {
    KeptAttention a;
    for (const auto& t : inputs) a.leaves.push_back(t.detach().requires_grad_(t.is_floating_point()));
    {
      torch::AutoGradMode grad_on(true);
      a.out = fn(a.leaves);
    }
    auto y = a.out.detach();
    r_->attentions.push_back(std::move(a));
    return y;
  }

 private:
  KeptRecord* r_;
};

// A GEMM whose output was kept: forward hands it back, backward is the linear's (the LinearImpl's when the GEMM ran
// through one: `--fp8`). The inputs come as a list, x [..., in], w [out, in] and, when there is one, b [out] (a custom
// Function takes no undefined tensor); x before the GEMM's input activation (act(x) is made in backward, and only
// for the wgrad: the recompute never writes it).
class CachedLinear : public torch::autograd::Function<CachedLinear> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList xwb, const torch::Tensor* kept, LinearImpl* impl,
                               int64_t act) {
    ctx->save_for_backward({xwb[0], xwb[1]});
    ctx->saved_data["has_bias"] = xwb.size() == 3;
    ctx->saved_data["impl"] = reinterpret_cast<int64_t>(impl);  // lives as long as the runner that installed it
    ctx->saved_data["act"] = act;
    return {kept->detach()};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& w = saved[1];
    const auto& g = grad_out[0];                  // [..., out]
    const auto g2 = g.reshape({-1, g.size(-1)});  // -> [rows, out]
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const bool want_b = has_bias && ctx->needs_input_grad(2);
    const auto act = static_cast<InputAct>(ctx->saved_data["act"].toInt());
    variable_list grads(has_bias ? 6 : 5);  // x, w, (b), kept, impl, act
    if (auto* impl = reinterpret_cast<LinearImpl*>(ctx->saved_data["impl"].toInt())) {
      auto r = impl->grads(g, x, w, ctx->needs_input_grad(0), ctx->needs_input_grad(1), want_b, act);
      grads[0] = r.dx, grads[1] = r.dw;
      if (want_b) grads[2] = r.db;
    } else {
      if (ctx->needs_input_grad(0)) {
        const auto da = g.matmul(w);  // [..., in]: the gradient of act(x)
        grads[0] = act == InputAct::gelu_tanh ? torch::gelu_backward(da, x, "tanh") : da;
      }
      if (ctx->needs_input_grad(1))  // [out, in]; none when frozen
        grads[1] = g2.t().mm(input_act(x, act).reshape({-1, x.size(-1)}));
      if (want_b) grads[2] = kernels::bias_grad(g2);  // [out]
    }
    return grads;
  }
};

// An attention whose output and graph were kept: forward hands the output back, backward runs the kept graph.
class KeptAttentionFn : public torch::autograd::Function<KeptAttentionFn> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, KeptAttention* kept) {
    ctx->saved_data["kept"] = reinterpret_cast<int64_t>(kept);
    return {kept->out.detach()};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* kept = reinterpret_cast<KeptAttention*>(ctx->saved_data["kept"].toInt());
    // Only the inputs the recompute's graph wants (frozen text keys under a LoRA want none): the kept graph runs
    // just the paths to them.
    std::vector<torch::Tensor> wanted;
    std::vector<bool> want(kept->leaves.size());
    for (size_t i = 0; i < kept->leaves.size(); ++i) {
      want[i] = kept->leaves[i].requires_grad() && ctx->needs_input_grad(i);
      if (want[i]) wanted.push_back(kept->leaves[i]);
    }
    std::vector<torch::Tensor> grads;
    if (!wanted.empty())
      grads = torch::autograd::grad({kept->out}, wanted, {grad_out[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    variable_list out;
    size_t j = 0;
    for (size_t i = 0; i < kept->leaves.size(); ++i) out.push_back(want[i] ? grads[j++] : torch::Tensor());
    out.push_back(torch::Tensor());                     // kept
    kept->out = torch::Tensor(), kept->leaves.clear();  // the graph's memory goes now, not with the block's call
    return out;
  }
};

class Replayer : public KeptOps {
 public:
  explicit Replayer(KeptRecord* r) : r_(r) {}
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, GemmRole role,
                       InputAct act) override {
    VDT_CHECK(li_ < r_->linears.size(),
              "selective checkpointing: the block's recompute made more GEMM calls than its "
              "forward (",
              r_->linears.size(), "); a block must run the same ops both times");
    const auto& kept = r_->linears[li_++];
    VDT_CHECK(kept.size(-1) == w.size(0) && kept.numel() / kept.size(-1) == x.numel() / x.size(-1),
              "selective checkpointing: GEMM call ", li_, " of the recompute is ", x.sizes(), " x ", w.sizes(),
              "^T, the forward's output was ", kept.sizes());
    std::vector<torch::Tensor> xwb = {x, w};
    if (b.defined()) xwb.push_back(b);
    auto y = CachedLinear::apply(at::TensorList(xwb), &kept, role == GemmRole::base ? current_linear_impl() : nullptr,
                                 static_cast<int64_t>(act))[0];
    return y;
  }
  torch::Tensor attention(const std::vector<torch::Tensor>& inputs, const AttentionFn&) override {
    VDT_CHECK(ai_ < r_->attentions.size(),
              "selective checkpointing: the block's recompute made more attention calls "
              "than its forward (",
              r_->attentions.size(), ")");
    auto& kept = r_->attentions[ai_++];
    VDT_CHECK(inputs.size() == kept.leaves.size(), "selective checkpointing: attention call ", ai_, " has ",
              inputs.size(), " inputs, its forward had ", kept.leaves.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      VDT_CHECK(inputs[i].sizes() == kept.leaves[i].sizes(), "selective checkpointing: attention call ", ai_, " input ",
                i, " is ", inputs[i].sizes(), " in the recompute, ", kept.leaves[i].sizes(), " in forward");
    return KeptAttentionFn::apply(at::TensorList(inputs), &kept)[0];
  }
  void check_done() const {
    VDT_CHECK(li_ == r_->linears.size() && ai_ == r_->attentions.size(), "selective checkpointing: the recompute made ",
              li_, " GEMM and ", ai_, " attention calls, the forward ", r_->linears.size(), " and ",
              r_->attentions.size(), "; a block must run the same ops both times");
  }

 private:
  KeptRecord* r_;
  size_t li_ = 0, ai_ = 0;
};

class BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, const BlockCall* call,
                               const CheckpointOptions* opts, HostOffload* offload) {
    variable_list saved = inputs.vec();
    std::shared_ptr<HostOffload::Entry> offloaded;
    const bool to_host = offload && inputs[0].is_cuda();
    const int64_t group = to_host ? offload->new_group() : 0;
    if (to_host) offloaded = offload->put(inputs[0], group), saved[0] = torch::Tensor();
    ctx->save_for_backward(saved);
    c10::List<bool> needs;
    for (const auto& t : inputs) needs.push_back(t.requires_grad());
    ctx->saved_data["needs_grad"] = needs;
    auto* held = new HeldCall{*call, {}, opts->selective && opts->keeps(call->block), nullptr};
    held->call.inputs.clear();  // the saved variables hold them (the residual on the host with offload_inputs)
    held->offloaded = std::move(offloaded);
    if (!held->selective && opts->attention_keep > 0) {
      RangedAttentionKeep::Stash stash;  // offload_inputs: the kept attention outputs go to the host too
      if (to_host)
        stash = [offload, group](const torch::Tensor& out) -> std::function<torch::Tensor()> {
          auto e = offload->put(out, group);
          return [offload, e] { return offload->get(e); };
        };
      held->attention = std::make_unique<RangedAttentionKeep>(opts->attention_keep, std::move(stash));
    }
    ctx->saved_data["call"] = reinterpret_cast<int64_t>(held);
    ctx->saved_data["opts"] = reinterpret_cast<int64_t>(opts);
    ctx->saved_data["offload"] = reinterpret_cast<int64_t>(offload);
    if (opts->before) opts->before(call->block);
    torch::Tensor y;
    {
      Recorder rec(&held->record);
      KeptOpsScope scope(held->selective ? &rec : nullptr);
      RangedAttentionKeepScope keep(held->attention.get());
      y = call->run(inputs.vec());  // grad off: nothing kept (selective: the GEMM and attention outputs)
    }
    if (opts->after) opts->after(call->block);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    std::unique_ptr<HeldCall> held(reinterpret_cast<HeldCall*>(ctx->saved_data["call"].toInt()));
    const BlockCall* call = &held->call;
    const auto* opts = reinterpret_cast<const CheckpointOptions*>(ctx->saved_data["opts"].toInt());
    const auto needs = ctx->saved_data["needs_grad"].toBoolList();
    if (held->offloaded)  // back from the host (HostOffload: started while the block after this one ran its backward)
      saved[0] = reinterpret_cast<HostOffload*>(ctx->saved_data["offload"].toInt())->get(held->offloaded);
    variable_list in;
    for (size_t i = 0; i < saved.size(); ++i) in.push_back(saved[i].detach().requires_grad_(needs.get(i)));
    if (opts->before) opts->before(call->block);
    torch::Tensor y;
    if (held->attention) held->attention->replay();
    {
      torch::AutoGradMode grad_on(true);  // grad mode is off inside backward unless create_graph
      Replayer rep(&held->record);
      KeptOpsScope scope(held->selective ? &rep : nullptr);
      RangedAttentionKeepScope keep(held->attention.get());
      y = call->run(in);
      if (held->selective) rep.check_done();
      if (held->attention) held->attention->check_done();
    }
    torch::autograd::backward({y}, {grad_out[0]});
    if (opts->after) opts->after(call->block);
    variable_list grads;
    for (const auto& t : in) grads.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    grads.push_back(torch::Tensor());  // call
    grads.push_back(torch::Tensor());  // opts
    grads.push_back(torch::Tensor());  // offload
    return grads;
  }
};

bool has_trainable(const torch::nn::Module& block) {
  for (const auto& p : block.parameters())
    if (p.requires_grad()) return true;
  return false;
}

}  // namespace

const char* checkpointing_name(Checkpointing m) {
  return m == Checkpointing::none ? "none" : m == Checkpointing::block ? "block" : "selective";
}

Checkpointing parse_checkpointing(const std::string& value, const std::string& flag,
                                  const std::vector<Checkpointing>& allowed) {
  static const std::vector<std::pair<std::string, Checkpointing>> names = {
      {"none", Checkpointing::none}, {"block", Checkpointing::block}, {"selective", Checkpointing::selective}};
  std::string choices;
  for (const auto& [n, m] : names)
    if (std::find(allowed.begin(), allowed.end(), m) != allowed.end()) {
      if (n == value) return m;
      choices += (choices.empty() ? "" : ", ") + n;
    }
  VDT_FAIL(flag, ": expected one of ", choices, ", got '", value, "'");
}

void check_selective_blocks(int64_t n, Checkpointing mode) {
  VDT_CHECK(n >= -1, kSelectiveBlocksFlag, " ", n, ": expected -1 (all) or a count >= 0");
  VDT_CHECK(n == -1 || mode == Checkpointing::selective, kSelectiveBlocksFlag, " ", n,
            " needs --checkpointing selective");
}

void check_attention_keep(double share, bool prefix_attention, Checkpointing mode, int64_t selective_blocks) {
  VDT_CHECK(share >= 0 && share <= 1, kAttnKeepFlag, " ", share, ": expected a share of the query rows in [0, 1]");
  VDT_CHECK(share == 0 || prefix_attention, kAttnKeepFlag, " ", share,
            " keeps the prefix attention's results; "
            "--attn mask runs one masked call with nothing to keep\n---> HINT: use --attn prefix, or leave ",
            kAttnKeepFlag, " out");
  VDT_CHECK(share == 0 || mode != Checkpointing::selective || selective_blocks >= 0, kAttnKeepFlag, " ", share,
            " applies to blocks that recompute whole; with --checkpointing selective every block keeps its attention "
            "already\n---> HINT: give ",
            kSelectiveBlocksFlag,
            " N (the blocks after the first N recompute whole), or "
            "leave ",
            kAttnKeepFlag, " out");
}

void enable_block_checkpointing(Denoiser& model, CheckpointOptions opts) {
  if (opts.selective && opts.selective_blocks >= 0) {
    auto set = std::make_shared<std::unordered_set<const torch::nn::Module*>>();
    const auto blocks = model.block_modules();
    for (int64_t i = 0; i < std::min<int64_t>(opts.selective_blocks, blocks.size()); ++i) set->insert(blocks[i]);
    opts.selective_set = set;
  }
  auto offload = opts.offload_inputs ? std::make_shared<HostOffload>() : nullptr;
  auto shared = std::make_shared<const CheckpointOptions>(std::move(opts));
  model.set_block_runner([shared, offload](const BlockCall& call) {
    if (!torch::GradMode::is_enabled()) {
      if (shared->before) shared->before(call.block);
      auto y = call.run(call.inputs);
      if (shared->after) shared->after(call.block);
      return y;
    }
    bool needs_grad = false;
    for (const auto& t : call.inputs) needs_grad = needs_grad || t.requires_grad();
    if (!needs_grad && has_trainable(call.block)) {  // else no backward reaches us
      BlockCall leaf = call;
      leaf.inputs[0] = call.inputs[0].detach().requires_grad_(true);
      return BlockCheckpoint::apply(at::TensorList(leaf.inputs), &leaf, shared.get(), offload.get())[0];
    }
    return BlockCheckpoint::apply(at::TensorList(call.inputs), &call, shared.get(), offload.get())[0];
  });
}

}  // namespace vdt
