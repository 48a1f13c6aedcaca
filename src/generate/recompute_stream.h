// A stream without a KV cache, the slow reference beside the families' streams (model/kv_stream.h): each pass runs
// the whole model on the committed chunks, at the level each was committed at, and the chunk being made, block-causal
// in chunks (what diffusion/euler.h causal_euler_sample recomputes), and keeps the chunk's part of the output. A
// Rollout over it is the recompute sampler. With autograd on, its gradients are those of the chunk computed without a
// cache, through the history's rows too (as a KV-cache stream's with StreamSpec::keep_history_graph). Not here: a
// window (every chunk stays) or speed.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/kv_stream.h"

namespace vdt {

class RecomputeStream : public KvStream {
 public:
  // spec: as for Denoiser::open_stream; its extra (H3: Picture 1, text tags) goes to every pass, its prefix_ids are
  // the text rows of chunks given without context_ids.
  RecomputeStream(Denoiser& model, StreamSpec spec);
  torch::Tensor forward(const DenoiserInputs& chunk, DenoiserAux* aux = nullptr) override;
  void commit(const DenoiserInputs& clean) override;
  int64_t first_pixel_frame(int64_t k) const override { return model_.first_pixel_frame(k); }
  std::pair<int64_t, int64_t> side_steps(const std::string& stream, int64_t n) const override;

 private:
  // The committed chunks and `chunk` as one input: frames, timesteps, text rows and side streams concatenated.
  DenoiserInputs with_history(const DenoiserInputs& chunk) const;
  Denoiser& model_;
  std::vector<DenoiserInputs> committed_;
};

}  // namespace vdt
