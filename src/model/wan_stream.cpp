// Streaming generation on the Wan DiT (model/kv_stream.h): the text is embedded once and each block's cross-attention
// keys and values kept; a chunk's tokens take the rotary frames of their place in the stream, attend in each block to
// the cached chunks and themselves, and a committed chunk's keys and values (timestep 0) stay. The sink is the first
// `sink_chunks` chunks (default 1: Wan's text lives in cross-attention, so its attention sink is the first chunk, as
// LongLive's frame sink; with a clean first frame that chunk is also the conditioning). Blocks run through the
// model's block runner, so a sharded base gathers its weights as in training. A pass with autograd on attends to a
// KvHistory and runs the full cross-attention on the embedded text (kept from the start, computed without autograd:
// the text embedding is frozen), so a LoRA on the cross-attention's k and v gets its gradients.
#include <torch/torch.h>

#include <algorithm>

#include "core/error.h"
#include "model/kv_stream.h"
#include "model/wan_dit.h"

namespace vdt {
namespace {

class WanStream : public KvStream {
 public:
  WanStream(WanDiTImpl& model, StreamSpec spec) : KvStream(std::move(spec)), m_(model) {
    auto& s = spec_;
    if (s.sink_chunks == -1) s.sink_chunks = 1;
    s.validate();
    const auto& c = m_.config();
    grid_ = m_.token_grid({s.batch, c.in_dim, s.chunk_frames, s.height, s.width});
    tokens_ = grid_[0] * grid_[1] * grid_[2];
    VDT_CHECK(s.context.defined() && s.context.dim() == 3 && s.context.size(2) == c.text_dim,
              "Wan stream: expected "
              "context rows [R, Lt, ",
              c.text_dim, "], got ", s.context.defined() ? s.context.sizes() : at::IntArrayRef{});
    VDT_CHECK(s.side_streams.empty(), "the wan base has no side streams");
    const int64_t kept = std::min(s.chunks, s.sink_chunks + s.kept_window() + 1);  // kept chunks + the one being made
    const auto opts = torch::TensorOptions().device(m_.device()).dtype(m_.compute_dtype());
    cache_ = std::make_unique<KvCache>(c.num_layers, s.batch, kept * tokens_, c.num_heads, c.head_dim(), opts);
    // The text, once: embedded rows [R, Lt, D], then each block's cross-attention keys and values.
    torch::NoGradGuard ng;
    ctx_ = m_.text_embedding->forward(s.context.to(m_.device(), m_.compute_dtype()));
    const auto& ctx = ctx_;
    auto blocks = m_.block_modules();
    for (int64_t i = 0; i < c.num_layers; ++i) {
      auto& block = *blocks[static_cast<size_t>(i)]->as<WanBlockImpl>();
      run_block(block, {ctx}, [&](const std::vector<torch::Tensor>& v) {
        auto [k, val] = block.cross_attn->text_kv(v[0]);
        cache_->set_text(i, k, val);
        return v[0];
      });
    }
  }

  torch::Tensor forward(const DenoiserInputs& in, DenoiserAux* aux) override {
    if (aux) aux->streams.clear();
    return run(in, /*commit=*/false);
  }

  void commit(const DenoiserInputs& clean) override {
    torch::AutoGradMode mode(spec_.keep_history_graph && torch::GradMode::is_enabled());
    DenoiserInputs in = clean;
    if (!in.t.defined() || !in.t_rows.defined()) {  // undefined: the clean level, the trainer's context
      if (!in.t.defined()) in.t = torch::zeros({spec_.batch, grid_[0]}, torch::kFloat32);
      const auto rows = distinct_timestep_rows(in.t.to(torch::kCPU));
      in.t_rows = rows.rows, in.t_index = rows.index;
    }
    run(in, /*commit=*/true);
    ++done_;
    const int64_t moved = keep_window();
    if (moved != moved_) rotate_sink(moved);
    moved_ = moved;
  }

  int64_t first_pixel_frame(int64_t k) const override { return m_.first_pixel_frame(k); }

 private:
  using Run = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;
  torch::Tensor run_block(WanBlockImpl& block, std::vector<torch::Tensor> inputs, const Run& fn) {
    const auto runner = m_.block_runner();
    return runner ? runner({block, std::move(inputs), fn}) : fn(inputs);
  }

  // One pass of chunk done_: x [B, C, cf, H, W] -> the prediction (undefined when committing). With autograd on, the
  // pass attends to a KvHistory (model/kv_cache.h) and runs eagerly.
  torch::Tensor run(const DenoiserInputs& in, bool commit) {
    const bool grad = torch::GradMode::is_enabled();
    const auto& c = m_.config();
    const int64_t B = spec_.batch, F = grid_[0];
    TORCH_CHECK(in.x.dim() == 5 && in.x.size(0) == B && in.x.size(1) == c.in_dim &&
                    in.x.size(2) == spec_.chunk_frames && in.x.size(3) == spec_.height && in.x.size(4) == spec_.width,
                "Wan stream: expected a chunk x [", B, ", ", c.in_dim, ", ", spec_.chunk_frames, ", ", spec_.height,
                ", ", spec_.width, "], got ", in.x.sizes());
    VDT_CHECK(done_ < spec_.chunks, "Wan stream: all ", spec_.chunks, " chunks are made (--chunks)");
    const auto device = m_.device();
    const auto t = in.t.dim() == 1 ? in.t.unsqueeze(1).expand({B, F}) : in.t;
    TORCH_CHECK(t.dim() == 2 && t.size(0) == B && t.size(1) == F, "Wan stream: expected t [B, ", F, "], got ",
                in.t.sizes());
    if (rope_chunk_ != done_) {  // the chunk's frames at their place in the stream
      rope_ = rope_table(c.head_dim(), grid_, device, done_ * F);
      rope_chunk_ = done_;
    }
    // [B, C, cf, H, W] -> [B, D, F', H', W'] -> [B, L, D] (row-major, as WanDiT::forward)
    auto x = m_.patch_embedding(in.x.to(device, m_.compute_dtype())).flatten(2).transpose(1, 2).contiguous();
    auto [e, e0] = m_.time_embedding_rows(t, in.t_rows, in.t_index, device);
    BlockInputs bin{x, e0, torch::Tensor(), rope_};
    if (in.context_ids.defined()) {
      TORCH_CHECK(in.context_ids.dim() == 2 && in.context_ids.size(0) == B && in.context_ids.size(1) == F,
                  "Wan stream: context_ids must be [B, F'=", F, "], got ", in.context_ids.sizes());
      bin.ctx_ids = in.context_ids.to(device, torch::kLong);
    } else if (spec_.prefix_ids.defined()) {
      bin.ctx_ids = spec_.prefix_ids.to(device, torch::kLong).view({B, 1}).expand({B, F});
    }
    cache_->begin(tokens_, done_, commit, commit && done_ < spec_.sink_chunks && spec_.drops());
    std::shared_ptr<const KvHistory> history;
    try {
      if (grad) history = cache_->history(/*copy=*/spec_.drops());
    } catch (...) {
      cache_->end_without_commit();
      throw;
    }
    if (grad) bin.ctx = ctx_;  // [R, Lt, D]: the full cross-attention
    // The block loop over [x, e0, rope cos, rope sin, ctx_ids]: one CUDA graph per kept-rows count when on.
    auto blocks_of = [this, bin, history](const std::vector<torch::Tensor>& v) {
      BlockInputs b = bin;
      b.x = v[0], b.e0 = v[1], b.rope = {v[2], v[3]}, b.ctx_ids = v[4];
      auto blocks = m_.block_modules();
      for (int64_t i = 0; i < static_cast<int64_t>(blocks.size()); ++i) {
        auto& block = *blocks[static_cast<size_t>(i)]->as<WanBlockImpl>();
        BlockInputs rest = b;
        rest.x = rest.e0 = torch::Tensor();
        rest.kv = {cache_.get(), i, history};
        b.x = run_block(block, {b.x, b.e0}, [&block, rest](const std::vector<torch::Tensor>& in) {
          BlockInputs r = rest;
          r.x = in[0], r.e0 = in[1];
          return block.forward(r);
        });
      }
      return b.x;
    };
    try {
      const std::vector<torch::Tensor> inputs{bin.x, bin.e0, bin.rope.cos, bin.rope.sin, bin.ctx_ids};
      const bool eager = grad || cache_->wants_raw_keys();
      bin.x = eager ? blocks_of(inputs) : graphs_.run(cache_->kept_rows(), inputs, blocks_of);
    } catch (...) {
      cache_->end_without_commit();
      throw;
    }
    cache_->end();
    if (commit) return {};
    return m_.unpatchify(m_.head(bin.x, e), grid_);
  }

  // The sink's keys at the frames just before the oldest kept chunk (the rolling offset, model/kv_stream.h).
  void rotate_sink(int64_t moved) {
    torch::NoGradGuard ng;
    const auto& c = m_.config();
    const auto& segs = cache_->segments();
    for (size_t i = 0; i < segs.size(); ++i) {
      if (segs[i].chunk < 0 || segs[i].chunk >= spec_.sink_chunks) continue;
      const auto table = rope_table(c.head_dim(), grid_, m_.device(), (segs[i].chunk + moved) * grid_[0]);
      for (int64_t b = 0; b < c.num_layers; ++b) {
        const auto& raw = cache_->raw_keys(b, i);
        VDT_CHECK(raw.defined(), "Wan stream: the sink's keys before rotation were not kept");
        cache_->keys(b, i).copy_(apply_rope(raw, table));
      }
    }
  }

  WanDiTImpl& m_;
  std::array<int64_t, 3> grid_{};
  int64_t tokens_ = 0;
  RopeTable rope_;
  torch::Tensor ctx_;  // [R, Lt, D] the embedded text rows (passes with autograd)
  int64_t rope_chunk_ = -1, moved_ = 0;
};

}  // namespace

std::unique_ptr<KvStream> WanDiTImpl::open_stream(const StreamSpec& spec) {
  VDT_CHECK(!has_sem_cond(),
            "streaming generation: this Wan base has the semantic-map adapter (gc_sem_cond), which "
            "the causal model does not take");
  return std::make_unique<WanStream>(*this, spec);
}

}  // namespace vdt
