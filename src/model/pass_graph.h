// CUDA graphs for a stream's passes (`--cuda-graphs`, streaming generation only; docs/causal.md "Generating with a
// trained LoRA"): a chunk's Euler steps and its commit run the same blocks on tensors of the same shapes with the
// cache's kept rows unchanged, so the block loop of a pass is launched as one recorded graph instead of thousands of
// kernels from the host. The first pass of a shape runs eagerly (the libraries make their plans and workspaces), the
// second is recorded on a side stream and replayed, later ones copy their inputs into the recorded ones and replay.
// What a body reads besides its inputs (weights, the cache's buffers) must stay where it was when recorded: the cache
// writes new rows at kept_rows(), so callers key a pass by it. A body must not sync with the host. A recording that
// fails turns the graphs off for the stream with one line on stderr: the eager passes give the same numbers. Off (and
// on a CPU) run() is body(inputs). Not here: what a pass computes (model/wan_stream.cpp, model/h3/h3_stream.cpp).
#pragma once
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace vdt {

// --cuda-graphs: auto = on for a CUDA device, off on a CPU.
enum class GraphMode { automatic, on, off };
// Throws naming `flag` and the choices.
GraphMode parse_graph_mode(const std::string& value, const std::string& flag);
// Whether passes on `device` are recorded; `on` on a device without CUDA graphs throws naming `flag`.
bool graphs_wanted(GraphMode mode, const torch::Device& device, const std::string& flag);

class PassGraphs {
 public:
  using Body = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;
  // on: record (a CUDA build on a CUDA device); max_graphs: recorded graphs kept at once (the least recently used is
  // dropped, with its memory pool).
  explicit PassGraphs(bool on = false, size_t max_graphs = 3);
  ~PassGraphs();
  PassGraphs(const PassGraphs&) = delete;
  PassGraphs& operator=(const PassGraphs&) = delete;

  // body(inputs) -> its output (a tensor of its own). Passes of one `key` (e.g. the cache's kept rows) and the same
  // input shapes, dtypes and devices share a graph; inputs may be undefined (kept undefined).
  torch::Tensor run(int64_t key, const std::vector<torch::Tensor>& inputs, const Body& body);
  bool on() const { return on_; }
  int64_t replays() const { return replays_; }  // passes replayed from a graph (tests, benchmarks)

 private:
  struct Entry;
  bool on_;
  size_t max_graphs_;
  int64_t clock_ = 0, replays_ = 0;
  std::pair<uint64_t, uint64_t> pool_{0, 0};  // the graphs' shared memory pool (a CUDA MempoolId_t)
  std::map<std::vector<int64_t>, std::unique_ptr<Entry>> entries_;
};

}  // namespace vdt
