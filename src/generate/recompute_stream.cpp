// RecomputeStream: the committed chunks' inputs are kept and concatenated before the chunk being made at every pass.
#include "generate/recompute_stream.h"

#include <torch/torch.h>

#include <map>

#include "core/error.h"
#include "model/embeddings.h"

namespace vdt {

RecomputeStream::RecomputeStream(Denoiser& model, StreamSpec spec) : KvStream(std::move(spec)), model_(model) {
  VDT_CHECK(spec_.window < 0 || spec_.window >= spec_.chunks, "the recompute stream keeps every chunk: --window ",
            spec_.window, " of ", spec_.chunks, " chunks is a KV-cache stream's");
  spec_.sink_chunks = 0;
  spec_.validate();
}

std::pair<int64_t, int64_t> RecomputeStream::side_steps(const std::string& stream, int64_t n) const {
  const auto b = model_.side_stream_chunks(stream, (n + 1) * spec_.chunk_frames, spec_.chunk_frames);
  return {b[static_cast<size_t>(n)], b[static_cast<size_t>(n + 1)]};
}

DenoiserInputs RecomputeStream::with_history(const DenoiserInputs& chunk) const {
  const int64_t B = chunk.x.size(0), cf = spec_.chunk_frames;
  auto ids_of = [&](const DenoiserInputs& in) {  // [B, cf] text rows of a chunk
    if (in.context_ids.defined()) return in.context_ids;
    if (!spec_.prefix_ids.defined()) return torch::Tensor();
    return spec_.prefix_ids.to(in.x.device(), torch::kLong).view({B, 1}).expand({B, cf});
  };
  auto t_of = [&](const DenoiserInputs& in) {  // [B, cf]
    return in.t.dim() == 1 ? in.t.view({B, 1}).expand({B, cf}) : in.t;
  };
  std::vector<torch::Tensor> xs, ts, ids;
  std::map<std::string, std::vector<torch::Tensor>> sides;
  std::vector<const DenoiserInputs*> all;
  for (const auto& c : committed_) all.push_back(&c);
  all.push_back(&chunk);
  for (const auto* in : all) {
    xs.push_back(in->x.to(chunk.x.scalar_type()));
    ts.push_back(t_of(*in).to(chunk.t.device(), torch::kFloat32));
    ids.push_back(ids_of(*in));
    for (const auto& name : spec_.side_streams) {
      for (const auto& key : {name, name + ".t"}) {
        auto it = in->extra.find(key);
        VDT_CHECK(it != in->extra.end(), "recompute stream: chunk inputs without '", key, "'");
        sides[key].push_back(it->second);
      }
    }
  }
  DenoiserInputs full;
  full.x = torch::cat(xs, 2);  // [B, C, (n+1) cf, H, W]
  full.t = torch::cat(ts, 1);  // [B, (n+1) cf]
  if (!full.t.is_cuda()) {     // distinct timesteps found on the host, as model_inputs does
    auto rows = distinct_timestep_rows(full.t);
    full.t_rows = rows.rows, full.t_index = rows.index;
  }
  full.context = chunk.context.defined() ? chunk.context : spec_.context.to(model_.device(), model_.compute_dtype());
  if (ids.back().defined()) full.context_ids = torch::cat(ids, 1);  // [B, (n+1) cf]
  full.sem_ids = chunk.sem_ids;
  full.attention = AttentionPattern::block_causal(cf);
  full.extra = spec_.extra;
  for (auto& [key, parts] : sides) full.extra[key] = torch::cat(parts, -1);  // steps last
  return full;
}

torch::Tensor RecomputeStream::forward(const DenoiserInputs& chunk, DenoiserAux* aux) {
  VDT_CHECK(done_ < spec_.chunks, "recompute stream: all ", spec_.chunks, " chunks are made (--chunks)");
  const auto full = with_history(chunk);
  DenoiserAux own;
  const auto out = model_.forward(full, &own);  // [B, C, (n+1) cf, H, W]
  const int64_t cf = chunk.x.size(2);
  if (aux) {
    aux->streams.clear();
    for (const auto& name : spec_.side_streams) {
      const int64_t A = chunk.extra.at(name).size(-1);
      const auto& s = own.streams.at(name);
      aux->streams[name] = s.narrow(-1, s.size(-1) - A, A);
    }
  }
  return out.narrow(2, out.size(2) - cf, cf);
}

void RecomputeStream::commit(const DenoiserInputs& clean) {
  VDT_CHECK(done_ < spec_.chunks, "recompute stream: all ", spec_.chunks, " chunks are made (--chunks)");
  DenoiserInputs kept = clean;
  if (!kept.t.defined()) kept.t = torch::zeros({clean.x.size(0), clean.x.size(2)}, torch::kFloat32);
  committed_.push_back(std::move(kept));
  ++done_;
}

}  // namespace vdt
