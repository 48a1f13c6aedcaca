// Streaming generation on the MiniMax-H3 DiT (model/kv_stream.h): the prefix [text | Picture 1] at the conditioning
// level (model time 0.999, h3_causal.h's option (a)) runs once and its keys and values are the cache's first segment
// and the attention sink; chunk n's rows are [audio ch0 | audio ch1 | video] as h3_causal orders them, its audio the
// steps whose rotary start falls inside it (h3_audio_chunk_bounds), every row at its rotary time in the stream (video
// latent k at origin + 5·first_pixel_frame(k)/3, audio step j at origin + j, as h3_packer lays out a span). A
// committed chunk's rows run at model time 1 (clean) unless the commit names its level. Blocks run through the
// model's block runner, so a sharded base gathers its weights as in training. One stream at a time (batch 1), as the
// packed forward. A pass with autograd on attends to a KvHistory and computes its AdaLN projections itself (the
// per-time cache holds constants).
#include <torch/torch.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "model/h3/h3_causal.h"
#include "model/h3/h3_dit.h"
#include "model/h3/h3_packer.h"
#include "model/kv_stream.h"

namespace vdt {
namespace {

// h3_packer's rotary clock: origin and offset in thirds of a unit (1 unit = one 40 Hz audio latent).
double at_thirds(int64_t origin3, int64_t offset3) {
  return static_cast<double>(origin3) / 3.0 + static_cast<double>(offset3) / 3.0;
}

const torch::Tensor* find(const std::map<std::string, torch::Tensor>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

class H3Stream : public KvStream {
 public:
  H3Stream(H3DiTImpl& model, StreamSpec spec) : KvStream(std::move(spec)), m_(model) {
    auto& s = spec_;
    if (s.sink_chunks == -1) s.sink_chunks = 0;  // the prefix is the sink
    s.validate();
    const auto& c = m_.config();
    VDT_CHECK(s.batch == 1, "streaming generation on the h3 base runs one stream at a time (batch 1), got ", s.batch);
    VDT_CHECK(s.height % 2 == 0 && s.width % 2 == 0, "h3 stream: latent ", s.height, " x ", s.width, " must be even");
    for (const auto& [key, value] : s.extra)
      VDT_CHECK(key == "text_tags" || key == "picture1" || key == "picture1.noise", "h3 stream: unknown input '", key,
                "' (known: text_tags, picture1, picture1.noise)");
    for (const auto& name : s.side_streams) VDT_CHECK(name == "audio", "the h3 base has no side stream '", name, "'");
    audio_ = !s.side_streams.empty();
    VDT_CHECK(s.context.defined() && s.context.dim() == 3 && s.context.size(2) == c.text_dim,
              "h3 stream: expected "
              "context rows [R, Lt, ",
              c.text_dim, "], got ", s.context.defined() ? s.context.sizes() : at::IntArrayRef{});
    const int64_t row = s.prefix_ids.defined() ? s.prefix_ids.reshape({-1})[0].item<int64_t>() : 0;
    const auto prompt = s.context[row];  // [Lt, text_dim]
    const int64_t Lt = prompt.size(0);
    const auto* pic = find(s.extra, "picture1");
    VDT_CHECK(!pic || (pic->dim() == 5 && pic->size(0) == 1 && pic->size(1) == c.latent_channels && pic->size(2) == 1),
              "h3 stream: expected picture1 [1, ", c.latent_channels, ", 1, Hp, Wp], got ", pic->sizes());

    // The span's geometry from h3_packer (one frame and one audio step): the prefix rows' positions, a frame's and
    // the audio channels' spatial coordinates; the media clock starts after the text (and Picture 1's unit).
    H3LayoutSpec ls;
    ls.text_len = Lt, ls.latent_t = 1, ls.latent_h = s.height, ls.latent_w = s.width, ls.audio_t = 1;
    if (pic) ls.references.push_back({H3RefKind::image, 1, pic->size(3), pic->size(4), 0});
    const auto probe = build_h3_layout(ls);
    prefix_rows_ = Lt + probe.cond_rows;
    frame_rows_ = probe.frame_rows();
    prefix_pos_ = probe.position_ids.narrow(0, 0, prefix_rows_).clone();  // [P, 3] float64
    frame_hw_ = probe.position_ids.index_select(0, probe.img_pos.narrow(0, probe.cond_rows, frame_rows_))
                    .narrow(1, 1, 2)
                    .clone();                                              // [fr, 2]
    const auto aud = probe.position_ids.index_select(0, probe.audio_pos);  // [2, 3]: ch0, ch1
    audio_w_ = {aud[0][2].item<double>(), aud[1][2].item<double>()};
    origin3_ = 3 * Lt + (pic ? 3 : 0);
    VDT_CHECK(aud[0][0].item<double>() == at_thirds(origin3_, 0),
              "h3 stream: the media clock's origin differs from "
              "the packer's");

    // Rows: the prefix, then the kept chunks and the one being made (the largest chunk: audio steps vary by one).
    const auto bounds = h3_audio_chunk_bounds(s.chunks * s.chunk_frames, s.chunk_frames);
    int64_t max_steps = 0;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) max_steps = std::max(max_steps, bounds[i + 1] - bounds[i]);
    const int64_t chunk_rows = s.chunk_frames * frame_rows_ + (audio_ ? 2 * max_steps : 0);
    const int64_t kept = std::min(s.chunks, s.sink_chunks + s.kept_window() + 1);
    const auto opts = torch::TensorOptions().device(m_.device()).dtype(m_.compute_dtype());
    cache_ = std::make_unique<KvCache>(c.num_layers, 1, prefix_rows_ + kept * chunk_rows, c.heads, c.head_dim, opts);
    VDT_CHECK(s.modulation_slots >= 0, "h3 stream: modulation_slots ", s.modulation_slots, ": expected >= 0");
    if (s.modulation_slots > 0) {  // at a fixed address from here on: recorded passes read it
      const auto& w = m_.blocks[0]->as<H3BlockImpl>()->adaln_proj->linear->weight;
      // [L, 6, slots * 3, D]: each of a block's six AdaLN tensors contiguous (the modulate and gate kernels take
      // them as they are), row slot * 3 + modality as adaln_proj lays them out
      ada_ = torch::zeros({c.num_layers, 6, s.modulation_slots * 3, c.hidden}, w.options());
      slot_time_.assign(static_cast<size_t>(s.modulation_slots), 0.f);
      slot_used_.assign(static_cast<size_t>(s.modulation_slots), -1);
    }

    // The prefix, once: refined text rows and Picture 1's conditioning rows, all at model time 0.999 (in the graph
    // only for a history with gradients).
    torch::AutoGradMode mode(s.keep_history_graph && torch::GradMode::is_enabled());
    const auto device = m_.device();
    const auto dtype = m_.compute_dtype();
    auto h = m_.token_refiner->forward(m_.condition_proj(prompt.to(device, dtype)), std::vector<int64_t>{0, Lt, Lt});
    if (pic) {
      const auto* noise = find(s.extra, "picture1.noise");
      auto clean = h3_patchify_video((*pic).to(torch::kFloat32));  // [1, C, 1, Hp, Wp] -> [R, Dv]
      auto rows =
          h3_cond_rows(clean, noise ? h3_patchify_video(noise->to(torch::kFloat32)) : torch::zeros_like(clean), 0.999);
      h = torch::cat({h, island(m_.video_patch_proj, rows)});  // [P, D]
    }
    std::vector<int64_t> tags(static_cast<size_t>(prefix_rows_), 0);
    const auto* text_tags = find(s.extra, "text_tags");
    const auto host_tags =
        text_tags ? text_tags->reshape({-1}).to(torch::kCPU, torch::kLong).contiguous() : torch::Tensor();
    for (int64_t i = 0; i < Lt; ++i)
      tags[static_cast<size_t>(i)] = text_tags ? std::max<int64_t>(host_tags.data_ptr<int64_t>()[i], 0) : 1;
    const std::vector<float> times(static_cast<size_t>(prefix_rows_), static_cast<float>(0.999));
    run_blocks(h, times, tags, prefix_pos_, -1, /*commit=*/true, /*keep_raw=*/s.drops());
  }

  torch::Tensor forward(const DenoiserInputs& in, DenoiserAux* aux) override { return run(in, aux, false); }

  void commit(const DenoiserInputs& clean) override {
    torch::AutoGradMode mode(spec_.keep_history_graph && torch::GradMode::is_enabled());
    run(clean, nullptr, true);
    ++done_;
    const int64_t moved = keep_window();
    if (moved != moved_) rotate_sink(moved);
    moved_ = moved;
  }

  int64_t first_pixel_frame(int64_t k) const override { return m_.first_pixel_frame(k); }

  std::pair<int64_t, int64_t> side_steps(const std::string& stream, int64_t n) const override {
    VDT_CHECK(stream == "audio" && audio_, "this h3 stream has no side stream '", stream, "'");
    const auto b = h3_audio_chunk_bounds((n + 1) * spec_.chunk_frames, spec_.chunk_frames);
    return {b[static_cast<size_t>(n)], b[static_cast<size_t>(n + 1)]};
  }

 private:
  torch::Tensor island(torch::nn::Linear& l, const torch::Tensor& x) {  // an fp32-island projection, as H3DiT's
    return l(x.to(m_.device(), l->weight.scalar_type())).to(m_.compute_dtype());
  }

  // Positions [rows, 3] float64 of chunk n's rows [audio ch0 | audio ch1 | video], the time axis shifted by `shift`.
  torch::Tensor chunk_positions(int64_t n, double shift = 0) const {
    std::vector<double> pos;
    if (audio_) {
      const auto [j0, j1] = side_steps("audio", n);
      for (int k = 0; k < 2; ++k)
        for (int64_t j = j0; j < j1; ++j) pos.insert(pos.end(), {at_thirds(origin3_, 3 * j) + shift, 0.0, audio_w_[k]});
    }
    auto hw = frame_hw_.contiguous();
    const double* p = hw.data_ptr<double>();
    for (int64_t f = n * spec_.chunk_frames; f < (n + 1) * spec_.chunk_frames; ++f) {
      const double t = at_thirds(origin3_, 5 * h3_first_pixel_frame(f)) + shift;
      for (int64_t r = 0; r < frame_rows_; ++r) pos.insert(pos.end(), {t, p[2 * r], p[2 * r + 1]});
    }
    return torch::tensor(pos, torch::kFloat64).view({-1, 3});
  }

  // The blocks over new rows h [S, D] with their model times, tags and positions; returns the residual stream.
  torch::Tensor run_blocks(const torch::Tensor& h, const std::vector<float>& times, const std::vector<int64_t>& tags,
                           const torch::Tensor& positions, int64_t chunk, bool commit, bool keep_raw) {
    const auto device = m_.device();
    const bool grad = torch::GradMode::is_enabled();
    auto [unique, inverse, counts] = at::_unique2(torch::tensor(times, torch::kFloat32), true, true);
    H3BlockInputs bin;
    bin.t_emb = m_.time_embedder(unique.to(device));  // [M, time_dim]
    inverse_ = inverse.reshape({-1}).to(device, torch::kLong);
    t_emb_ = bin.t_emb;
    // Each row's AdaLN row: its timestep's row of t_emb (computed in the blocks), or of the cached projections.
    const auto slots = grad ? torch::Tensor() : modulation_slots(unique, bin.t_emb);  // [M] host int64, or undefined
    const bool cached = slots.defined();
    const auto ts = cached ? slots.index_select(0, inverse.reshape({-1})).to(device) : inverse_;  // [S]
    bin.ada_rows = ts * 3 + torch::tensor(tags, torch::kLong).to(device);
    bin.rope = h3_rope_table(positions.to(device), m_.config().rope_len);
    bin.x = h;
    cache_->begin(h.size(0), chunk, commit, keep_raw);
    std::shared_ptr<const KvHistory> history;
    try {
      if (grad) history = cache_->history(/*copy=*/spec_.drops());
    } catch (...) {
      cache_->end_without_commit();
      throw;
    }
    // The block loop over [x, t_emb, ada_rows, rope cos, rope sin]: one CUDA graph per kept-rows count when on.
    auto blocks_of = [this, bin, cached, history](const std::vector<torch::Tensor>& v) {
      H3BlockInputs b = bin;
      b.x = v[0], b.t_emb = v[1], b.ada_rows = v[2], b.rope = {v[3], v[4]};
      int64_t i = 0;
      for (auto& mod : *m_.blocks) {
        auto& block = *mod->as<H3BlockImpl>();
        H3BlockInputs rest = b;
        rest.x = rest.t_emb = torch::Tensor();
        if (cached) rest.ada = ada_[i];  // [6, slots * 3, D]
        rest.kv = {cache_.get(), i++, history};
        auto fn = [&block, rest](const std::vector<torch::Tensor>& in) {
          H3BlockInputs r = rest;
          r.x = in[0], r.t_emb = in[1];
          return block.forward(r);
        };
        const auto runner = m_.block_runner();
        b.x = runner ? runner({block, {b.x, b.t_emb}, fn}) : fn({b.x, b.t_emb});
      }
      return b.x;
    };
    try {
      const std::vector<torch::Tensor> inputs{bin.x, bin.t_emb, bin.ada_rows, bin.rope.cos, bin.rope.sin};
      // A pass past the modulation cache's slots runs eagerly: the recorded passes read the cache.
      const bool eager = grad || keep_raw || chunk < 0 || (!cached && spec_.modulation_slots > 0);
      bin.x = eager ? blocks_of(inputs) : graphs_.run(cache_->kept_rows(), inputs, blocks_of);
    } catch (...) {
      cache_->end_without_commit();
      throw;
    }
    cache_->end();
    return bin.x;
  }

  // The cache slots of a pass's distinct model times `unique` [M] (float32, host) with time embeddings t_emb
  // [M, time_dim]: a time seen before keeps its slot; a new one takes a free slot or the least recently used one not
  // in this pass, and every block's projection of it is computed once, through the block runner (a sharded base
  // gathers the block), into ada_. Undefined when caching is off or the pass has more distinct times than slots.
  torch::Tensor modulation_slots(const torch::Tensor& unique, const torch::Tensor& t_emb) {
    const int64_t M = unique.size(0), slots = spec_.modulation_slots;
    if (slots == 0 || M > slots) return {};
    ++passes_;
    const auto u = unique.contiguous();
    const float* value = u.data_ptr<float>();
    std::vector<int64_t> slot(static_cast<size_t>(M), -1), new_rows, new_slots;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < slots; ++k)
        if (slot_used_[k] >= 0 && slot_time_[k] == value[m]) {
          slot[m] = k, slot_used_[k] = passes_;
          break;
        }
    for (int64_t m = 0; m < M; ++m) {
      if (slot[m] >= 0) continue;
      int64_t k = 0;  // a free slot, else the least recently used (never one of this pass: M <= slots)
      for (int64_t j = 1; j < slots; ++j)
        if (slot_used_[j] < slot_used_[k]) k = j;
      slot[m] = k, slot_used_[k] = passes_, slot_time_[k] = value[m];
      new_rows.push_back(m), new_slots.push_back(k);
    }
    if (!new_rows.empty()) {
      const auto device = t_emb.device();
      const auto te = t_emb.index_select(0, torch::tensor(new_rows, torch::kLong).to(device));  // [F, time_dim]
      const auto at = torch::tensor(new_slots, torch::kLong).to(device);
      const auto runner = m_.block_runner();
      int64_t i = 0;
      for (auto& mod : *m_.blocks) {
        auto& block = *mod->as<H3BlockImpl>();
        auto fn = [&block](const std::vector<torch::Tensor>& in) { return block.adaln_proj->project(in[0]); };
        const auto y = runner ? runner({block, {te}, fn}) : fn({te});  // [F, 18D]
        const int64_t F = y.size(0), D = m_.config().hidden;
        // [F, 18D] -> [F, 3, 6, D] (timestep, modality, tensor) -> [6, F, 3, D], into [6, slots, 3, D] at the slots
        ada_[i++].view({6, slots, 3, D}).index_copy_(1, at, y.view({F, 3, 6, D}).permute({2, 0, 1, 3}));
      }
    }
    return torch::tensor(slot, torch::kLong);
  }

  // Chunk done_: video and, with audio, its audio steps -> the prediction of noise − x0 (undefined when committing).
  torch::Tensor run(const DenoiserInputs& in, DenoiserAux* aux, bool commit) {
    const auto& c = m_.config();
    const int64_t cf = spec_.chunk_frames, H = spec_.height, W = spec_.width, n = done_;
    VDT_CHECK(n < spec_.chunks, "h3 stream: all ", spec_.chunks, " chunks are made (--chunks)");
    TORCH_CHECK(in.x.dim() == 5 && in.x.size(0) == 1 && in.x.size(1) == c.latent_channels && in.x.size(2) == cf &&
                    in.x.size(3) == H && in.x.size(4) == W,
                "h3 stream: expected a chunk x [1, ", c.latent_channels, ", ", cf, ", ", H, ", ", W, "], got ",
                in.x.sizes());
    const auto* audio = find(in.extra, "audio");
    const auto* audio_t = find(in.extra, "audio.t");
    int64_t A = 0;
    if (audio_) {
      const auto [j0, j1] = side_steps("audio", n);
      A = j1 - j0;
      TORCH_CHECK(audio && audio->dim() == 4 && audio->size(0) == 1 && audio->size(1) == 2 && audio->size(3) == A &&
                      (audio_t ? audio_t->numel() == A : commit),
                  "h3 stream: chunk ", n, " needs its ", A, " audio steps: audio [1, 2, Da, ", A, "] and audio.t [1, ",
                  A, "], got ", audio ? audio->sizes() : at::IntArrayRef{});
    }
    // Rows [audio ch0 | audio ch1 | video] embedded by their projections.
    auto video = island(m_.video_patch_proj, h3_patchify_video(in.x.to(torch::kFloat32)));  // [cf*fr, D]
    auto h = audio_ ? torch::cat({island(m_.audio_patch_proj, h3_pack_audio((*audio)[0].to(torch::kFloat32))), video})
                    : video;
    // Model times per row (a commit without its t: clean, 1) and tags (audio 2, video 0).
    const auto tv = commit && !in.t.defined() ? std::vector<double>(static_cast<size_t>(cf), 1.0)
                                              : h3_model_times(in.t.dim() == 1 ? in.t.expand({cf}) : in.t[0]);
    VDT_CHECK(static_cast<int64_t>(tv.size()) == cf, "h3 stream: expected t [1, ", cf, "], got ", in.t.sizes());
    const auto ta =
        !audio_ || (commit && !audio_t) ? std::vector<double>(static_cast<size_t>(A), 1.0) : h3_model_times(*audio_t);
    std::vector<float> times;
    std::vector<int64_t> tags;
    for (int k = 0; k < (audio_ ? 2 : 0); ++k)
      for (int64_t j = 0; j < A; ++j) {
        times.push_back(static_cast<float>(ta[static_cast<size_t>(j)]));
        tags.push_back(2);
      }
    for (int64_t f = 0; f < cf; ++f)
      for (int64_t r = 0; r < frame_rows_; ++r) {
        times.push_back(static_cast<float>(tv[static_cast<size_t>(f)]));
        tags.push_back(0);
      }
    const bool keep_raw = commit && n < spec_.sink_chunks && spec_.drops();
    const auto x = run_blocks(h, times, tags, chunk_positions(n), n, commit, keep_raw);
    if (commit) return {};
    // The heads on the new rows; the raw outputs approximate x0 − ε: negated, the prediction of noise − x0.
    auto [video_all, audio_all] = m_.final_layer(x, t_emb_, inverse_);
    const int64_t a_rows = audio_ ? 2 * A : 0;
    if (aux) {
      aux->streams.clear();
      if (audio_)
        aux->streams["audio"] = -h3_unpack_audio(audio_all.narrow(0, 0, a_rows).to(torch::kFloat32), 2, A).unsqueeze(0);
    }
    return -h3_unpatchify_video(video_all.narrow(0, a_rows, cf * frame_rows_).to(torch::kFloat32), cf, H, W);
  }

  // The sink (the prefix and the first sink_chunks chunks) at the rotary times just before the oldest kept chunk
  // (the rolling offset, model/kv_stream.h): their time axis moves by the video clock of the chunks dropped.
  void rotate_sink(int64_t moved) {
    torch::NoGradGuard ng;
    const int64_t S = spec_.sink_chunks, cf = spec_.chunk_frames;
    const double shift =
        (5.0 / 3.0) * static_cast<double>(h3_first_pixel_frame((S + moved) * cf) - h3_first_pixel_frame(S * cf));
    const auto& segs = cache_->segments();
    for (size_t i = 0; i < segs.size(); ++i) {
      if (segs[i].chunk >= S) continue;
      auto pos = segs[i].chunk < 0 ? prefix_pos_.clone() : chunk_positions(segs[i].chunk, shift);
      if (segs[i].chunk < 0) pos.select(1, 0).add_(shift);
      const auto table = h3_rope_table(pos.to(m_.device()), m_.config().rope_len);
      for (int64_t b = 0; b < cache_->blocks(); ++b) {
        const auto& raw = cache_->raw_keys(b, i);
        VDT_CHECK(raw.defined(), "h3 stream: the sink's keys before rotation were not kept");
        cache_->keys(b, i).copy_(h3_apply_rope(raw[0], table).unsqueeze(0));
      }
    }
  }

  H3DiTImpl& m_;
  bool audio_ = false;
  int64_t prefix_rows_ = 0, frame_rows_ = 0, origin3_ = 0, moved_ = 0;
  torch::Tensor prefix_pos_, frame_hw_;  // [P, 3], [fr, 2] float64
  std::array<double, 2> audio_w_{};
  torch::Tensor t_emb_, inverse_;   // the last pass's time embedding and each row's index into it
  torch::Tensor ada_;               // [L, 6, slots * 3, D]: each block's AdaLN tensors of the slots' model times
  std::vector<float> slot_time_;    // the model time each slot holds
  std::vector<int64_t> slot_used_;  // the pass that last used each slot (-1: empty)
  int64_t passes_ = 0;
};

}  // namespace

std::unique_ptr<KvStream> H3DiTImpl::open_stream(const StreamSpec& spec) {
  return std::make_unique<H3Stream>(*this, spec);
}

}  // namespace vdt
