// The stream's checks and window rule, shared by every family; the families' streams are model/wan_stream.cpp and
// model/h3/h3_stream.cpp.
#include "model/kv_stream.h"

#include <algorithm>

#include "core/error.h"

namespace vdt {

void StreamSpec::validate() const {
  VDT_CHECK(chunks >= 1, "--chunks ", chunks, ": a stream makes at least one chunk (--chunks 1 or more)");
  VDT_CHECK(window == -1 || window >= 1, "--window ", window,
            ": the window keeps at least the last finished chunk "
            "(--window 1 or more; leave it out to keep every chunk)");
  VDT_CHECK(sink_chunks >= 0, "--sink-chunks ", sink_chunks, ": expected 0 or more first chunks kept as the sink");
  VDT_CHECK(chunk_frames >= 1 && height >= 1 && width >= 1 && batch >= 1, "stream: chunk of ", chunk_frames,
            " latent frames of ", height, " x ", width, ", batch ", batch, ": expected >= 1 each");
  VDT_CHECK(span_chunks >= 1, "stream: the trained span has ", span_chunks, " chunks, expected >= 1");
  VDT_CHECK(!keep_history_graph || !drops(), "stream: a history with gradients keeps every chunk, but --window ",
            window, " drops chunks of the ", chunks, ": leave the window out or detach the history");
  if (chunks <= span_chunks) return;  // every position is one the span had
  VDT_CHECK(window >= 1, "--chunks ", chunks, " is past the ", span_chunks,
            " chunks the model was trained on: give "
            "--window K (K <= ",
            std::max<int64_t>(span_chunks - 1 - sink_chunks, 0), " with --sink-chunks ", sink_chunks,
            ") so that every position stays inside the trained span");
  VDT_CHECK(sink_chunks + window + 1 <= span_chunks, "--window ", window, " with --sink-chunks ", sink_chunks,
            ": the sink, the window and the chunk being made (", sink_chunks + window + 1, " chunks) must fit in the ",
            span_chunks, " chunks the model was trained on; use --window ",
            std::max<int64_t>(span_chunks - 1 - sink_chunks, 1), " or less",
            sink_chunks + 1 >= span_chunks ? " and fewer --sink-chunks" : "");
}

std::unique_ptr<KvStream> Denoiser::open_stream(const StreamSpec&) {
  VDT_FAIL("the ", family(), " base has no streaming generation (KV cache)");
}

std::pair<int64_t, int64_t> KvStream::side_steps(const std::string& stream, int64_t) const {
  VDT_FAIL("this stream has no side stream '", stream, "'");
}

int64_t KvStream::keep_window() {
  const int64_t sink = spec_.sink_chunks, window = spec_.kept_window();
  const int64_t first_kept = std::max(sink, done_ - window);  // oldest chunk after the sink that stays
  for (size_t i = 0; i < cache_->segments().size();) {
    const int64_t c = cache_->segments()[i].chunk;
    if (c >= sink && c < first_kept)
      cache_->drop(i);
    else
      ++i;
  }
  return first_kept - sink;
}

}  // namespace vdt
