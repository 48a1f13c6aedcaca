// Streaming generation through the base-model seam (docs/causal.md "Generating with a trained LoRA"): a stream holds
// a KV cache (model/kv_cache.h) with the prefix encoded once (H3: text and Picture 1 at the conditioning level; Wan:
// the text's cross-attention keys and values) and the finished chunks' keys and values at the clean level, the
// trainer's context convention. forward() runs the chunk being made attending to the cache and itself; commit()
// runs a finished chunk at its context level (timestep 0 unless given) and appends its keys and values once, then
// drops chunks beyond the window. A pass runs with autograd when the caller's grad mode is on (a trainer's rollout,
// generate/rollout.h): it then reads the cache's rows as a KvHistory (model/kv_cache.h) and writes none, so a
// checkpointed block's recompute sees what its forward saw; the commit stays a pass of its own, outside any block.
// Positions (the rolling offset): chunks keep their absolute rotary positions; a window that has moved past the
// sink makes the sink's keys rotate again, so that the sink sits just before the oldest kept chunk, where it sat in
// training. Every distance a query sees is then one of the trained span's. Not here: the Euler loop
// (generate/rollout.h), noise, files.
#pragma once
#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/denoiser.h"
#include "model/kv_cache.h"
#include "model/pass_graph.h"

namespace vdt {

struct StreamSpec {
  int64_t batch = 1;
  int64_t chunk_frames = 1, height = 0, width = 0;  // a chunk's latent frames, latent H and W
  int64_t chunks = 1;                               // chunks the stream makes (sizes the cache); --chunks
  int64_t window = -1;                              // finished chunks kept after the sink (-1: all); --window
  int64_t sink_chunks = -1;  // first chunks kept as the attention sink (-1: the family's default); --sink-chunks
  int64_t span_chunks = 6;   // chunks of the span the model was trained on
  torch::Tensor context;     // [R, Lt, text_dim]: every text row a chunk may name (its context_ids)
  torch::Tensor prefix_ids;  // [B] int64: each stream's prompt row (H3's prefix); undefined: row b
  std::map<std::string, torch::Tensor> extra;  // family conditioning (H3: text_tags [B, Lt], picture1, picture1.noise)
  std::vector<std::string> side_streams;       // side streams each chunk carries (H3: "audio"); empty: none
  AttentionKernel kernel = AttentionKernel::sdpa;  // eager: the slow reference (tests)
  bool graphs = false;  // each pass's block loop recorded once and replayed as a CUDA graph (model/pass_graph.h)
  // H3: each block's AdaLN projection of a timestep computed once and kept for this many distinct model times (the
  // Euler grid's few timesteps and the clean level repeat every chunk); 0: computed in every pass (the reference).
  int64_t modulation_slots = 32;
  // With autograd on, the prefix (at open_stream) and each commit keep their keys and values in the graph, so that
  // later passes' gradients reach them (a history with gradients; no window may drop a chunk, and the commits must not
  // run inside a checkpointed block). Off: the cache's rows are constants to every pass (a detached history).
  bool keep_history_graph = false;

  // The window in chunks after the sink (every chunk when -1), and whether a chunk is ever dropped.
  int64_t kept_window() const { return window < 0 ? chunks : window; }
  bool drops() const { return kept_window() < chunks - sink_chunks; }
  // Throws naming the flag at fault (--chunks, --window, --sink-chunks) and the fix. sink_chunks resolved first.
  void validate() const;
};

class KvStream {
 public:
  explicit KvStream(StreamSpec spec) : spec_(std::move(spec)), graphs_(spec_.graphs) {}
  virtual ~KvStream() = default;
  // The chunk being made, chunk chunks_done(): x [B, C, chunk_frames, H, W] noisy, t [B, chunk_frames] (0..1000),
  // context_ids [B, chunk_frames] (rows of spec.context; undefined: each stream's prefix row), extra: each side
  // stream's steps of this chunk ("audio" [B, 2, Da, Ac]) and their timesteps ("audio.t" [B, Ac]) -> the prediction
  // of noise − x0 [B, C, chunk_frames, H, W]; aux->streams the side streams'. The cache is read, not changed. With
  // autograd on the prediction is in the graph (the stream and its cache must outlive the backward).
  virtual torch::Tensor forward(const DenoiserInputs& chunk, DenoiserAux* aux = nullptr) = 0;
  // The finished chunk appended to the cache, run at its t (the context level; undefined: timestep 0, clean; side
  // streams at their ".t", clean when absent); then chunks beyond the window are dropped and the sink re-rotated.
  // Without autograd unless keep_history_graph.
  virtual void commit(const DenoiserInputs& clean) = 0;
  // Pixel frames before latent frame k of the stream (the VAE's clock; Wan 4k - 3, H3 clips of 17 frames per 5).
  virtual int64_t first_pixel_frame(int64_t k) const = 0;
  // The side stream's steps of chunk n: [first, end) on the stream's clock.
  virtual std::pair<int64_t, int64_t> side_steps(const std::string& stream, int64_t n) const;

  int64_t chunks_done() const { return done_; }
  int64_t cache_bytes() const { return cache_ ? cache_->bytes() : 0; }
  const StreamSpec& spec() const { return spec_; }
  const PassGraphs& graphs() const { return graphs_; }
  const KvCache& cache() const { return *cache_; }
  KvCache& cache() { return *cache_; }

 protected:
  // After a commit: drops the chunks before the window (after the sink) and returns how many chunks the window has
  // moved past the sink so far (0 while nothing was dropped).
  int64_t keep_window();
  StreamSpec spec_;
  PassGraphs graphs_;  // a pass's block loop keyed by the cache's kept rows (the rows it writes after)
  std::unique_ptr<KvCache> cache_;
  int64_t done_ = 0;
};

}  // namespace vdt
