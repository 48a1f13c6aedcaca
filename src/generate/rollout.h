// The streaming chunk loop as a library piece (docs/generate.md): a Rollout makes a stream's chunks one after the
// other, each by a few model passes of its guidance branches against their KV caches (model/kv_stream.h), then commits
// the finished chunk to the caches as a pass of its own. Sampling (sample_stream) runs every pass without autograd; a
// trainer (few-step distillation) chooses the steps of a chunk that run with autograd and takes the chunk's clean
// prediction as a tensor in the graph. The commit is never part of a block's forward, so block checkpointing
// (distributed/activation_checkpoint.h) recomputes a step's blocks against the same cache rows. Not here: which
// conditions a stream has (generate/request.h builds the branches), noise draws, files.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "diffusion/euler.h"
#include "diffusion/flow_match.h"
#include "model/kv_stream.h"

namespace vdt {

// A branch's model inputs for chunk n: x (video [B, C, cf, H, W] and each side stream's steps of the chunk) at
// timesteps t [B, cf] (0..1000) -> what its stream's forward and commit take (text rows of the chunk, side streams and
// their ".t", moved to the model's device).
using ChunkInputsFn = std::function<DenoiserInputs(int64_t n, const SampleState& x, const torch::Tensor& t)>;

// One guidance branch: a stream (Denoiser::open_stream, or a RecomputeStream) and how its inputs are built.
struct RolloutBranch {
  std::unique_ptr<KvStream> stream;
  ChunkInputsFn inputs;
};

struct RolloutConfig {
  FlowGrid grid;           // the steps of every chunk: sigmas and timesteps (rollout_grid)
  double cfg_scale = 1.0;  // v = neg + cfg (pos - neg); a negative branch is needed when not 1
};

// The steps of a chunk: the inference grid of an EulerConfig (steps, shift, denoising strength), or, when
// `timesteps` is not empty, those timesteps (0..1000, decreasing: a few-step student's list) as they are.
FlowGrid rollout_grid(const EulerConfig& cfg, const std::vector<double>& timesteps = {});

// How one chunk is made.
struct ChunkPlan {
  std::vector<int64_t> grad_steps;  // the steps (0-based) whose model passes run with autograd; the rest run without
  int64_t last_step = -1;           // the chunk stops after this step (-1: after the last one)
  torch::Tensor first_frame;        // [B, C, 1, H, W]: frame 0 given clean (timestep 0), re-imposed after every step
  // Noise for step k's move to step k + 1's level: x <- (1 - sigma') x0 + sigma' noise(k) (the few-step students'
  // sampler, fresh noise each step). Empty: the Euler step x <- x + v (sigma' - sigma), the sampler's.
  std::function<SampleState(int64_t k)> renoise;
};

struct ChunkResult {
  SampleState x;   // the chunk after its last step: the sample when every step ran (float32)
  SampleState x0;  // the last step's clean prediction x - sigma v (guided; float32), in the graph when that step ran
                   // with autograd
};

class Rollout {
 public:
  // `negative` may have no stream: no guidance (cfg_scale must then be 1).
  Rollout(RolloutBranch positive, RolloutBranch negative, RolloutConfig cfg);

  // One guided evaluation of chunk chunks_done() at x, step k of the grid (frame 0 at timestep 0 with a first frame):
  // the velocity v (noise - x0) and the clean prediction x - sigma_k v, float32. With autograd when `grad`.
  struct Prediction {
    SampleState velocity, x0;
  };
  Prediction predict(const SampleState& x, int64_t k, bool first_frame, bool grad);

  // Chunk chunks_done() from its noise (video [B, C, cf, H, W], side streams' steps of the chunk), step by step as
  // `plan` says; the state moves between steps in the mode of the step before (a graph from a step with autograd
  // reaches the next one). The chunk is not committed.
  ChunkResult run_chunk(const SampleState& noise, const ChunkPlan& plan = {});

  // The finished chunk appended to every branch's cache: one pass at `timestep` (the context level: 0, clean, as the
  // trainer's context) without autograd, unless the streams keep their history's graph (StreamSpec::
  // keep_history_graph) and autograd is on. `clean` is what run_chunk returned (or the caller's own chunk).
  void commit(const SampleState& clean, double timestep = 0);

  int64_t chunks_done() const { return positive_.stream->chunks_done(); }
  int64_t steps() const { return cfg_.grid.sigmas.size(0); }
  KvStream& stream() { return *positive_.stream; }  // the conditioned branch's
  KvStream* negative_stream() { return negative_.stream.get(); }
  int64_t cache_bytes() const;  // every branch's cache

 private:
  SampleState evaluate(RolloutBranch& b, const SampleState& x, const torch::Tensor& t);
  RolloutBranch positive_, negative_;
  RolloutConfig cfg_;
};

// Noise of chunk n (video [B, C, cf, H, W] and the side streams' steps of chunk n).
using ChunkNoiseFn = std::function<SampleState(int64_t n)>;
// Chunk n is done (its sample); called before it is committed and before chunk n + 1 starts.
using ChunkDoneFn = std::function<void(int64_t n, const SampleState& chunk)>;

// Noise of chunk n's move after step k (ChunkPlan::renoise): a few-step student's sampler.
using StepNoiseFn = std::function<SampleState(int64_t n, int64_t k)>;

// Sampling: `chunks` more chunks, every step without autograd, each handed to on_chunk then committed at timestep 0
// (the last one only with commit_last: a stream that continues later) and on_commit(n) called. first_frame
// [B, C, 1, H, W], when defined, is imposed on frame 0 of the first chunk made. With step_noise, each step's clean
// prediction is noised afresh to the next level with it (the few-step student's sampler) instead of an Euler step.
void sample_stream(Rollout& rollout, int64_t chunks, const ChunkNoiseFn& noise, const torch::Tensor& first_frame,
                   const ChunkDoneFn& on_chunk, bool commit_last = false,
                   const std::function<void(int64_t n)>& on_commit = {}, const StepNoiseFn& step_noise = {});

}  // namespace vdt
