// `vdt bench sample`: streaming generation timed (docs/causal.md "Generating with a trained LoRA"): a random-weight
// base of the preset with a random LoRA attached, random text (H3: a Picture 1 on the video's latent grid and the
// audio stream), streamed chunk by chunk with the KV cache by the streaming Euler loop. Reports each chunk's latency
// (its Euler steps and its commit), the generated video frames per second (the VAE's pixel frames of the timed chunks
// over their time), the KV cache's memory and the peak memory from the streams' opening on (the model's build left
// out). VDT_TRACE=<file> with VDT_TRACE_STEP=<n> records chunk n's steps and commit (train/loop/trace.h). Runs on a GPU
// (bf16) or, with a tiny preset, on the CPU.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "tools/stream_speed.h"
#include "train/loop/config_sections.h"

namespace vdt {

struct SampleBenchConfig {
  std::string model = "wan2.2-ti2v-5b";
  int64_t height = 30, width = 52;  // latent grid (480 x 832 pixels for the Wan2.2 and H3 VAEs)
  int64_t chunk_frames = 0;         // 0: the base's (Wan 3, H3 5: one VAE clip)
  int64_t chunks = 12, window = 3, sink_chunks = -1, span_chunks = 6;
  int64_t steps = 4;
  double cfg = 1.0;             // 1: no guidance (one branch); else two branches
  double shift = 0;             // 0: the base's sampling shift (diffusion/flow_match.h)
  int64_t text_len = 0;         // 0: the base's (Wan 512, H3 256)
  std::string picture1 = "on";  // H3: on | off
  std::string audio = "on";     // H3: on | off
  int64_t lora_rank = 32;
  int64_t warmup_chunks = -1;  // chunks left out of the frames per second; -1: until the window is full
  int64_t layers = 0;          // > 0: fewer blocks than the preset (tests)
  std::string device = "cuda";
  std::string precision = "bf16";  // bf16 | fp32
  uint64_t seed = 0;
  StreamSpeed speed;  // --fp8, --cuda-graphs, --merge-lora, --stream-blocks
  // Each chunk's video latents [1, C, cf, H, W] float32 as it is done (checks of the numbers; not timed apart).
  std::function<void(int64_t, const torch::Tensor&)> on_chunk;
  void validate() const;
  static const std::vector<ConfigField<SampleBenchConfig>>& fields();
};

struct SampleBenchResult {
  std::vector<double> chunk_s, commit_s;  // per chunk: Euler steps, commit (the last chunk's: 0, not run)
  std::vector<int64_t> chunk_frames_px;   // pixel frames of each chunk
  double prefix_s = 0;                    // opening the streams (the prefix encoded once)
  double median_chunk_s = 0;              // median over the timed chunks of Euler + commit
  double frames_per_s = 0;                // pixel frames of the timed chunks / their time (the steady stream)
  double stream_frames_per_s = 0;         // every chunk's pixel frames / their time (warm-up included)
  int64_t warmup_chunks = 0;              // chunks left out of frames_per_s (as resolved)
  double cache_gib = 0, peak_gib = 0;
  int64_t rows_per_chunk = 0, prefix_rows = 0, sink_chunks = 0, window = 0;
  bool graphs = false;        // the passes recorded as CUDA graphs
  int64_t graph_replays = 0;  // passes replayed from a graph (positive and negative branch)
  std::string family;
};

SampleBenchResult run_sample_bench(const SampleBenchConfig& cfg);

}  // namespace vdt
