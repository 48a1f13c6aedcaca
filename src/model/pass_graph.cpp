// PassGraphs. Recording needs LibTorch's CUDA library (VDT_WITH_TORCH_CUDA, set for this file alone by CMakeLists.txt);
// without it the graphs are never on.
#include "model/pass_graph.h"

#include <torch/torch.h>

#include <cstdio>

#include "core/error.h"

#ifdef VDT_WITH_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace vdt {

GraphMode parse_graph_mode(const std::string& value, const std::string& flag) {
  if (value == "auto") return GraphMode::automatic;
  if (value == "on") return GraphMode::on;
  if (value == "off") return GraphMode::off;
  VDT_FAIL(flag, " '", value, "': expected auto (on for a CUDA device), on or off");
}

bool graphs_wanted(GraphMode mode, const torch::Device& device, const std::string& flag) {
#ifdef VDT_WITH_TORCH_CUDA
  const bool can = device.is_cuda();
#else
  const bool can = false;
#endif
  VDT_CHECK(mode != GraphMode::on || can, flag, " on: CUDA graphs need a CUDA device and a LibTorch with CUDA (device ",
            device.str(), "); use ", flag, " off or auto");
  return mode != GraphMode::off && can;
}

struct PassGraphs::Entry {
  int64_t seen = 0, used = 0;
  std::vector<torch::Tensor> inputs;  // the recorded inputs: later passes copy theirs in
  torch::Tensor output;
#ifdef VDT_WITH_TORCH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

PassGraphs::PassGraphs(bool on, size_t max_graphs) : on_(on), max_graphs_(std::max<size_t>(max_graphs, 1)) {
#ifndef VDT_WITH_TORCH_CUDA
  on_ = false;
#endif
}

PassGraphs::~PassGraphs() = default;

namespace {

// The key, the inputs' shapes, dtypes and devices: passes that may share a graph.
std::vector<int64_t> pass_signature(int64_t key, const std::vector<torch::Tensor>& inputs) {
  std::vector<int64_t> sig{key};
  for (const auto& t : inputs) {
    if (!t.defined()) {
      sig.push_back(-1);
      continue;
    }
    sig.push_back(t.dim());
    sig.insert(sig.end(), t.sizes().begin(), t.sizes().end());
    sig.push_back(static_cast<int64_t>(t.scalar_type()));
    sig.push_back(static_cast<int64_t>(t.device().index()));
  }
  return sig;
}

}  // namespace

torch::Tensor PassGraphs::run(int64_t key, const std::vector<torch::Tensor>& inputs, const Body& body) {
  if (!on_) return body(inputs);
#ifdef VDT_WITH_TORCH_CUDA
  for (const auto& t : inputs)
    if (t.defined() && !t.is_cuda()) return body(inputs);  // a host input: nothing to record
  auto& slot = entries_[pass_signature(key, inputs)];
  if (!slot) slot = std::make_unique<Entry>();
  Entry& e = *slot;
  e.used = ++clock_;
  if (e.graph) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) e.inputs[i].copy_(inputs[i]);
    e.graph->replay();
    ++replays_;
    return e.output.clone();  // the graph's output buffer is overwritten by its next replay
  }
  if (e.seen++ == 0) return body(inputs);  // the warm-up pass, eager

  // Room for one more graph: the least recently used goes, with its pool.
  size_t graphs = 0;
  for (const auto& [sig, other] : entries_) graphs += other->graph ? 1 : 0;
  while (graphs >= max_graphs_) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second->graph && (oldest == entries_.end() || it->second->used < oldest->second->used)) oldest = it;
    oldest->second.reset(new Entry{});
    --graphs;
  }

  const auto device = inputs.empty() || !inputs[0].defined() ? torch::Device(torch::kCUDA, 0) : inputs[0].device();
  for (const auto& t : inputs) e.inputs.push_back(t.defined() ? t.clone() : torch::Tensor());
  auto current = at::cuda::getCurrentCUDAStream(device.index());
  auto side = at::cuda::getStreamFromPool(false, device.index());
  at::cuda::CUDAEvent ready;
  ready.record(current);  // the side stream starts after the inputs' copies
  ready.block(side);
  e.graph = std::make_unique<at::cuda::CUDAGraph>();
  // One memory pool for all of this stream's graphs: they replay one at a time and each output is copied out at once,
  // so a graph may reuse what another one's intermediates used (one pass's activations, not one per graph).
  if (pool_.first == 0 && pool_.second == 0) pool_ = at::cuda::graph_pool_handle();
  try {
    c10::cuda::CUDAStreamGuard guard(side);
    e.graph->capture_begin({pool_.first, pool_.second});
    try {
      e.output = body(e.inputs);
    } catch (...) {
      try {
        e.graph->capture_end();
      } catch (...) {
      }
      throw;
    }
    e.graph->capture_end();
  } catch (const std::exception& err) {
    std::fprintf(stderr, "[vdt] --cuda-graphs: recording a pass failed; the stream runs eagerly from here (%s)\n",
                 err.what());
    on_ = false;
    entries_.clear();
    return body(inputs);
  }
  at::cuda::CUDAEvent recorded;
  recorded.record(side);
  recorded.block(current);
  e.graph->replay();  // recording ran nothing: this pass's numbers come from the first replay
  ++replays_;
  return e.output.clone();
#else
  return body(inputs);
#endif
}

}  // namespace vdt
