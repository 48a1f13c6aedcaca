// The chunked H3 sequence: one gather of every per-row tensor from [noisy rows | clean rows | one padding row] in
// chunk order, the unique timesteps recomputed over the new rows, and the query blocks of the block-causal rule.
#include "model/h3/h3_causal.h"

#include <torch/torch.h>

#include "core/error.h"

namespace vdt {

int64_t h3_span_audio_steps(int64_t frames) { return (5 * h3_first_pixel_frame(frames) + 2) / 3; }

std::vector<int64_t> h3_audio_chunk_bounds(int64_t frames, int64_t chunk_frames) {
  VDT_CHECK(chunk_frames >= 1 && frames % chunk_frames == 0, "h3 chunks: a span of ", frames,
            " latent frames does not ", "split into chunks of ", chunk_frames, " (--chunk-frames)");
  std::vector<int64_t> b;
  for (int64_t c = 0; c * chunk_frames < frames; ++c) b.push_back((5 * h3_first_pixel_frame(c * chunk_frames) + 2) / 3);
  b.push_back(h3_span_audio_steps(frames));
  return b;
}

H3Inputs h3_block_causal(const H3Layout& layout, const H3Packed& noisy, const H3Packed* clean, int64_t chunk_frames) {
  const auto& sp = layout.spec;
  VDT_CHECK(sp.keyframes.empty() && layout.ref_audio_rows == 0, "h3 chunks: keyframes and reference audio are not ",
            "part of the block-causal sequence (give Picture 1 as an image reference)");
  const int64_t S = layout.seq_len, T = sp.latent_t, A = sp.audio_t, ch = sp.audio_channels;
  const int64_t L = sp.text_len, cond = layout.cond_rows, fr = layout.frame_rows();
  const auto bounds = h3_audio_chunk_bounds(T, chunk_frames);
  VDT_CHECK(A == 0 || A == bounds.back(), "h3 chunks: ", A, " audio steps for a span of ", T, " latent frames; the ",
            "chunks' rotary clock needs ", bounds.back());
  const int64_t chunks = T / chunk_frames;
  auto img = layout.img_pos.accessor<int64_t, 1>(), aud = layout.audio_pos.accessor<int64_t, 1>();

  // Source rows: [0, S) noisy, [S, 2S) clean, 2S a padding row.
  std::vector<int64_t> src;
  for (int64_t r = 0; r < L; ++r) src.push_back(r);          // text
  for (int64_t r = 0; r < cond; ++r) src.push_back(img[r]);  // Picture 1 (reference image rows)
  const int64_t prefix = static_cast<int64_t>(src.size());
  std::vector<int64_t> out_rows, audio_rows;  // final rows of the target video (frame-major) and audio
  std::vector<std::pair<int64_t, int64_t>> clean_chunks, noisy_chunks;
  std::vector<std::vector<int64_t>> audio_by_copy(2 * static_cast<size_t>(ch));  // [copy][channel] -> final rows
  auto add_chunks = [&](int64_t offset, int copy, std::vector<std::pair<int64_t, int64_t>>& ranges) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = static_cast<int64_t>(src.size());
      for (int64_t k = 0; k < ch && A > 0; ++k)
        for (int64_t j = bounds[c]; j < bounds[c + 1]; ++j) {
          audio_by_copy[static_cast<size_t>(copy * ch + k)].push_back(static_cast<int64_t>(src.size()));
          src.push_back(offset + aud[k * A + j]);
        }
      for (int64_t f = c * chunk_frames; f < (c + 1) * chunk_frames; ++f)
        for (int64_t r = 0; r < fr; ++r) src.push_back(offset + img[cond + f * fr + r]);
      ranges.emplace_back(begin, static_cast<int64_t>(src.size()));
    }
  };
  if (clean) add_chunks(S, 0, clean_chunks);
  add_chunks(0, 1, noisy_chunks);
  // out_pos: video rows in frame order, clean copies first; audio_pos: per channel [clean steps | noisy steps].
  for (const auto* ranges : {&clean_chunks, &noisy_chunks})
    for (const auto& [b, e] : *ranges)
      for (int64_t r = e - chunk_frames * fr; r < e; ++r) out_rows.push_back(r);
  for (int64_t k = 0; k < ch; ++k)
    for (int copy = clean ? 0 : 1; copy < 2; ++copy)
      for (int64_t r : audio_by_copy[static_cast<size_t>(copy * ch + k)]) audio_rows.push_back(r);
  const int64_t used = static_cast<int64_t>(src.size());
  const int64_t S2 = (used + sp.seq_align - 1) / sp.seq_align * sp.seq_align;
  while (static_cast<int64_t>(src.size()) < S2) src.push_back(2 * S);

  // Gather every per-row tensor; the padding row is zeros at position 0 with tag -1 and the text rows' time.
  const auto& n = noisy.inputs;
  const auto dev = n.x.device();
  auto gather = [&](const torch::Tensor& noisy_rows, const torch::Tensor& clean_rows, const torch::Tensor& pad) {
    return torch::cat({noisy_rows, clean ? clean_rows : noisy_rows, pad.to(noisy_rows.dtype())})
        .index_select(0, torch::tensor(src, torch::kLong).to(noisy_rows.device()));
  };
  const auto& c_in = clean ? clean->inputs : n;
  const float t_pad = noisy.timesteps.narrow(0, layout.used < S ? layout.used : 0, 1).item<float>();
  H3Inputs out;
  out.x = gather(n.x[0], c_in.x[0], torch::zeros({1, n.x.size(2)}, n.x.options())).unsqueeze(0);
  out.audio_x =
      gather(n.audio_x[0], c_in.audio_x[0], torch::zeros({1, n.audio_x.size(2)}, n.audio_x.options())).unsqueeze(0);
  out.position_ids =
      gather(n.position_ids[0], c_in.position_ids[0], torch::zeros({1, 3}, n.position_ids.options())).unsqueeze(0);
  out.token_tags = gather(n.token_tags, c_in.token_tags, torch::full({1}, -1, n.token_tags.options()));
  const auto times = gather(noisy.timesteps, clean ? clean->timesteps : noisy.timesteps,
                            torch::full({1}, t_pad, noisy.timesteps.options()));  // [S2] float32
  auto [unique, inverse, counts] = at::_unique2(times.to(torch::kCPU), /*sorted=*/true, /*return_inverse=*/true);
  out.unique_timesteps = unique.to(dev);
  out.inverse_indices = inverse.reshape({-1}).to(dev, torch::kLong);
  out.prompt_embeds = n.prompt_embeds;
  std::vector<int64_t> img_rows(static_cast<size_t>(cond));
  for (int64_t r = 0; r < cond; ++r) img_rows[static_cast<size_t>(r)] = L + r;
  img_rows.insert(img_rows.end(), out_rows.begin(), out_rows.end());
  out.img_pos = torch::tensor(img_rows, torch::kLong).to(dev);
  out.out_pos = torch::tensor(out_rows, torch::kLong).to(dev);
  out.audio_pos = torch::tensor(audio_rows, torch::kLong).to(dev);
  out.text_pos = torch::arange(L, torch::kLong).to(dev);
  out.cu_seqlens = torch::tensor({0, static_cast<int>(used), static_cast<int>(S2)}, torch::kInt32).to(dev);
  out.refiner_cu_seqlens = n.refiner_cu_seqlens;

  // Which rows see which.
  auto& blocks = out.attend.blocks;
  if (prefix > 0) blocks.push_back({0, prefix, {{0, prefix}}});
  for (size_t c = 0; c < clean_chunks.size(); ++c)
    blocks.push_back({clean_chunks[c].first, clean_chunks[c].second, {{0, clean_chunks[c].second}}});
  for (size_t c = 0; c < noisy_chunks.size(); ++c) {
    const auto [b, e] = noisy_chunks[c];
    if (clean && clean_chunks[c].first > 0)  // P and the clean chunks before c, then itself
      blocks.push_back({b, e, {{0, clean_chunks[c].first}, {b, e}}});
    else if (clean)
      blocks.push_back({b, e, {{b, e}}});
    else
      blocks.push_back({b, e, {{0, e}}});
  }
  if (S2 > used) blocks.push_back({used, S2, {{used, S2}}});
  return out;
}

}  // namespace vdt
