// The stream preview: stream_causal_window with the preview's Euler steps, then the frame grid.
#include "generate/stream_preview.h"

#include <torch/torch.h>

#include <filesystem>

#include "data/synth_vae.h"
#include "generate/preview.h"
#include "generate/window.h"

namespace vdt {

StreamPreview stream_preview(Denoiser& model, const CausalDataset& ds, const std::string& data_root,
                             int64_t chunk_frames, int64_t steps, uint64_t seed, bool clean_first_frame) {
  EulerConfig ec;
  ec.steps = steps;
  const auto r = stream_causal_window(model, ds, 0, chunk_frames, ec, seed, clean_first_frame, {});
  StreamPreview p;
  p.tag = "stream/" + r.clip_id + "@" + std::to_string(r.start);
  double total = 0;
  for (size_t i = 0; i < r.chunk_seconds.size(); ++i) total += r.chunk_seconds[i] + r.commit_seconds[i];
  p.seconds_per_chunk = r.chunk_seconds.empty() ? 0 : total / static_cast<double>(r.chunk_seconds.size());
  if (std::filesystem::exists(std::filesystem::path(data_root) / "vae.safetensors")) {
    const auto vae = SynthVae::open(data_root);
    p.grid = frame_grid({vae.decode(r.ground_truth), vae.decode(r.sample)}, 2, 4);
  }
  return p;
}

}  // namespace vdt
