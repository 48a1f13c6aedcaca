// The streaming loop: euler_sample per chunk (so the grid is the one causal_euler_sample uses), then the commits.
#include "diffusion/stream_sampler.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

void stream_sample(const StreamBranch& positive, const StreamBranch& negative, const ChunkNoiseFn& noise,
                   const torch::Tensor& first_frame, const StreamConfig& stream, const EulerConfig& cfg,
                   const ChunkDoneFn& on_chunk) {
  VDT_CHECK(stream.chunks >= 1, "--chunks ", stream.chunks, ": a stream makes at least one chunk");
  VDT_CHECK(positive.velocity && positive.commit, "stream_sample: the positive branch needs a velocity and a commit");
  VDT_CHECK(!negative.velocity || negative.commit, "stream_sample: the negative branch needs a commit");
  torch::NoGradGuard ng;
  for (int64_t n = 0; n < stream.chunks; ++n) {
    EulerConfig c = cfg;
    c.first_frame_cond = n == 0 && first_frame.defined();
    const auto chunk = euler_sample(positive.velocity, negative.velocity, noise(n),
                                    c.first_frame_cond ? first_frame : torch::Tensor(), c);
    if (on_chunk) on_chunk(n, chunk);
    if (n + 1 == stream.chunks && !stream.commit_last) break;
    positive.commit(chunk);
    if (negative.velocity) negative.commit(chunk);
  }
}

}  // namespace vdt
