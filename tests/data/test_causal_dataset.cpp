// The causal dataset (docs/design.md §5): windows of a span cut from each clip's stream, start frames a pure function
// of (seed, epoch, sample) inside the stream, val split by clip, flagged and short streams counted.
#include <torch/torch.h>

#include <set>

#include "data/causal_dataset.h"
#include "test_util.h"
#include "tools/synth.h"

namespace vdt {
namespace {

TEST(CausalDataset, WindowsStartsAndSplit) {
  test::TempDir dir;
  SynthConfig sc;
  sc.out = dir.file("data"), sc.latent_frames = 13, sc.n_drop = 2;
  const auto rep = synth_root(sc);
  CausalDataConfig c;
  c.root = sc.out, c.span_frames = 6, c.val_clips = 3, c.seed = 5;
  CausalDataset ds(c);
  EXPECT_EQ(ds.n_flagged(), 2);
  EXPECT_EQ(ds.n_short(), 0);
  const int64_t usable = rep.n_train + rep.n_val - 2;
  EXPECT_EQ(static_cast<int64_t>(ds.train().size() + ds.val().size()), usable * 2);  // 13 frames: 2 slots of 6
  std::set<int64_t> train_clips, val_clips;
  for (const auto& w : ds.train()) train_clips.insert(w.clip);
  for (const auto& w : ds.val()) val_clips.insert(w.clip);
  EXPECT_EQ(val_clips.size(), 3u);
  for (int64_t v : val_clips) EXPECT_FALSE(train_clips.count(v)) << "clip in both splits";
  // Starts: inside the stream, in the slot's range, a pure function of (seed, epoch, index), varying with the epoch.
  std::set<int64_t> seen;
  for (int64_t i = 0; i < static_cast<int64_t>(ds.train().size()); ++i)
    for (int64_t e = 0; e < 4; ++e) {
      const int64_t s = ds.train_start(i, e), slot = ds.train()[static_cast<size_t>(i)].slot;
      EXPECT_GE(s, slot * 6);
      EXPECT_LE(s, slot * 6 + 1);  // 13 - 2*6 = 1 frame of slack
      EXPECT_EQ(s, CausalDataset(c).train_start(i, e));
      seen.insert(s - slot * 6);
    }
  EXPECT_EQ(seen.size(), 2u);  // both offsets occur
  const auto w = ds.load(ds.train()[0], ds.train_start(0, 0));
  EXPECT_EQ(w.latents.sizes(), (std::vector<int64_t>{16, 6, 8, 8}));
  EXPECT_EQ(w.text_rows.size(), 6u);
  torch::Tensor ctx, ids;
  ds.text_of(w.text_rows, &ctx, &ids);
  EXPECT_EQ(ids.sizes(), (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(ctx.size(0), ids.max().item<int64_t>() + 1);
  // The plan's caption count bounds every window's distinct text rows.
  const int64_t most = ds.max_text_rows();
  EXPECT_GE(most, 1);
  EXPECT_LE(most, 6);
  int64_t seen_most = 0;
  for (const auto* ws : {&ds.train(), &ds.val()})
    for (const auto& wr : *ws)
      for (int64_t start : {wr.slot * 6, wr.slot * 6 + 1}) {
        const auto win = ds.load(wr, start);
        torch::Tensor rows, row_ids;
        ds.text_of(win.text_rows, &rows, &row_ids);
        seen_most = std::max(seen_most, rows.size(0));
      }
  EXPECT_LE(seen_most, most);
  EXPECT_GE(seen_most, 2);  // the synthetic captions change within a window
  int64_t every_start = 1;  // the reference: a set for each start of each clip
  for (const auto& clip : ds.clips())
    for (size_t st = 0; st + 6 <= clip.frame_rows.size(); ++st)
      every_start = std::max<int64_t>(
          every_start, std::set<int64_t>(clip.frame_rows.begin() + st, clip.frame_rows.begin() + st + 6).size());
  EXPECT_EQ(most, every_start);
  // Spans longer than every stream leave nothing: an error naming the counts.
  c.span_frames = 14;
  test::expect_error([&] { CausalDataset bad(c); }, {"shorter than the span of 14"});
}

}  // namespace
}  // namespace vdt
