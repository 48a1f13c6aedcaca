// SftDataset: split rules of the Python trainer (drop rows, val, leaks, res), vocab folding, prompt lookup errors,
// dropout draws as a function of (seed, epoch, index), the world-anchored mask, and collate's text context.
#include <gtest/gtest.h>

#include "data/sft_dataset.h"
#include "data_test_util.h"

namespace vdt {
namespace {

using test::expect_error;
using test::TinyRoot;

TEST(DataSft, DropRowsExcludedUnlessIncludeDropped) {
  TinyRoot t;
  auto cfg = t.config();
  SftDataset train(cfg);
  EXPECT_EQ(train.clip_ids(), (std::vector<std::string>{"t0", "t1", "t2", "t3"}));
  EXPECT_EQ(train.n_total(), 5);
  EXPECT_EQ(train.n_dropped(), 1);
  EXPECT_EQ(train.runs(), (std::set<std::string>{"rA", "rB"}));
  cfg.include_dropped = true;
  SftDataset all(cfg);
  EXPECT_EQ(all.size(), 5u);
  EXPECT_EQ(all.n_dropped(), 0);
  cfg.limit = 2;
  EXPECT_EQ(SftDataset(cfg).clip_ids(), (std::vector<std::string>{"t0", "t1"}));
  // val never includes drop rows, even with --include_dropped.
  auto vcfg = t.config("val");
  vcfg.include_dropped = true;
  SftDataset val(vcfg);
  EXPECT_EQ(val.clip_ids(), (std::vector<std::string>{"v0", "v1"}));
  EXPECT_EQ(val.n_total(), 3);
  EXPECT_EQ(val.n_dropped(), 1);
  check_no_leak(train.root());
}

TEST(DataSft, MaxTextRowsCountsTheDistinctCaptionsOfASample) {
  TinyRoot t;
  auto cfg = t.config();
  cfg.limit = 1;  // t0: "a red car" twice, "a blue tree"
  EXPECT_EQ(SftDataset(cfg).max_text_rows(), 2);
  cfg.limit = 0;  // t2: three captions
  EXPECT_EQ(SftDataset(cfg).max_text_rows(), 3);
}

TEST(DataSft, ValAppliesNoDropout) {
  TinyRoot t;
  auto cfg = t.config("val");
  cfg.text_dropout = cfg.cond_dropout = cfg.mask_p = 1.0;
  SftDataset val(cfg);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const auto s = val.get(0, epoch);
    EXPECT_FALSE(s.text_drop || s.cond_drop);
    EXPECT_EQ(s.mask_frac, 0.0);
    EXPECT_TRUE(torch::equal(s.ids, TinyRoot::ids_for(5)));
  }
  // The same probabilities on train drop everything.
  auto tcfg = t.config();
  tcfg.text_dropout = tcfg.cond_dropout = 1.0;
  const auto s = SftDataset(tcfg).get(0, 0);
  EXPECT_TRUE(s.text_drop && s.cond_drop);
  EXPECT_TRUE(torch::all(s.ids == 255).item<bool>());
}

TEST(DataSft, LeakByClipAborts) {
  TinyRoot t;
  t.clips()[5].clip_id = "t1";
  t.write_index();
  SftDataset train(t.config());
  expect_error([&] { check_no_leak(train.root()); }, {"leak", "1 clip(s) in both splits ('t1' (lines", "0 run(s)"});
}

TEST(DataSft, LeakByRunAborts) {
  TinyRoot t;
  t.clips()[6].run = "rB";
  t.write_index();
  SftDataset train(t.config());
  expect_error([&] { check_no_leak(train.root()); },
               {"clips.jsonl", "leak", "0 clip(s)", "1 run(s) in both splits ('rB' (train clip"});
}

TEST(DataSft, ResMismatchNamesBothAndFix) {
  TinyRoot t;
  auto cfg = t.config();
  cfg.res = "1280x704";
  expect_error([&] { SftDataset ds(cfg); }, {"dataset.json", "832x480", "1280x704", "--res", "GC_RES"});
}

TEST(DataSft, PromptMissingFromTableNamesClipCellPrompt) {
  TinyRoot t;
  t.clips()[1].cells[2] = "a cat";
  t.write_index();
  expect_error([&] { SftDataset ds(t.config()); }, {"clips.jsonl:2", "clip 't1'", "cell 2", "\"a cat\"", t.table()});
}

TEST(DataSft, NullPromptMissingFromTable) {
  TinyRoot t;
  t.prompts().erase(t.prompts().begin());  // drop ""
  t.write_text_table();
  expect_error([&] { SftDataset ds(t.config()); }, {t.table(), "null prompt", "dataset.json null_prompt"});
}

TEST(DataSft, TextTableDimsMustMatchDatasetJson) {
  TinyRoot t;
  t.info()["text_dim"] = 16;
  t.write_dataset_json();
  expect_error([&] { SftDataset ds(t.config()); }, {t.table(), "[N, 4, 8]", "[N, 4, 16]"});
}

TEST(DataSft, MissingCondFileFailsEagerly) {
  TinyRoot t;
  std::filesystem::remove(t.cond("t3"));
  expect_error([&] { SftDataset ds(t.config()); }, {t.cond("t3"), "missing cond file"});
}

TEST(DataSft, IdsFoldedByCollapseParts) {
  TinyRoot t;
  auto cfg = t.config();
  cfg.vocab = "ids";
  SftDataset ds(cfg);
  const auto s = ds.get_with(1, false, false);
  const auto raw = TinyRoot::ids_for(1).to(torch::kLong);
  const auto want =
      torch::where(raw == 255, raw, torch::div(raw, 2, "floor")).to(torch::kByte);  // collapse 2k,2k+1 -> k
  EXPECT_TRUE(torch::equal(s.ids, want));
  EXPECT_TRUE(torch::equal(SftDataset(t.config()).get_with(1, false, false).ids, TinyRoot::ids_for(1)));
  // A root stored in the ids vocabulary cannot be trained with --vocab parts.
  t.info()["vocab"] = "ids";
  t.write_dataset_json();
  expect_error([&] { SftDataset ds(t.config()); }, {"--vocab parts", "stores vocab 'ids'"});
}

TEST(DataSft, GetWithVariantsAndShapes) {
  TinyRoot t;
  SftDataset ds(t.config());
  const auto table = ds.text_table();
  const auto cond = ds.get_with(0, false, false);
  EXPECT_EQ(cond.latents.sizes(), (std::vector<int64_t>{4, 3, 4, 4}));
  EXPECT_EQ(cond.latents.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(cond.latents, TinyRoot::latents_for(0)));
  EXPECT_EQ(cond.ids.sizes(), (std::vector<int64_t>{3, 8, 8}));
  EXPECT_EQ(cond.text_rows, (std::vector<int64_t>{1, 1, 2}));
  const auto nulltext = ds.get_with(0, true, false);
  EXPECT_EQ(nulltext.text_rows, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_TRUE(torch::equal(nulltext.ids, cond.ids));
  const auto uncond = ds.get_with(0, false, true);
  EXPECT_TRUE(torch::all(uncond.ids == 255).item<bool>());
  EXPECT_EQ(uncond.text_rows, cond.text_rows);
  EXPECT_TRUE(uncond.cond_drop && !uncond.text_drop);
  expect_error([&] { ds.get(4, 0); }, {"index 4"});
}

TEST(DataSft, DropoutDrawsDependOnlyOnSeedEpochIndex) {
  // Rates over many indices; a draw repeats exactly; epochs and seeds differ.
  int64_t text = 0, cond = 0, mask = 0, n = 20000, same_epoch = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto d = draw_sft(7, 3, i, 0.1, 0.05, 0.5);
    const auto again = draw_sft(7, 3, i, 0.1, 0.05, 0.5);
    ASSERT_EQ(d.text_drop, again.text_drop);
    ASSERT_EQ(d.x0, again.x0);
    text += d.text_drop, cond += d.cond_drop, mask += d.mask;
    EXPECT_FALSE(d.cond_drop && d.mask);
    if (d.mask) {
      EXPECT_GE(d.x1 - d.x0, 0.2 - 1e-12);
      EXPECT_LE(d.y1 - d.y0, 0.5 + 1e-12);
    }
    const auto e = draw_sft(7, 4, i, 0.1, 0.05, 0.5);
    same_epoch += e.text_drop == d.text_drop && e.cond_drop == d.cond_drop && e.mask == d.mask;
  }
  EXPECT_NEAR(text / double(n), 0.1, 0.01);
  EXPECT_NEAR(cond / double(n), 0.05, 0.007);
  EXPECT_NEAR(mask / double(n), 0.5 * 0.95, 0.02);
  EXPECT_LT(same_epoch, n * 0.9);  // another epoch gives other draws
  // Changing one probability leaves the other decisions unchanged (separate streams).
  for (int64_t i = 0; i < 200; ++i)
    EXPECT_EQ(draw_sft(7, 3, i, 0.1, 0.05, 0.5).text_drop, draw_sft(7, 3, i, 0.1, 0.5, 0.9).text_drop);

  // Through the dataset: the same (seed, epoch, index) gives the same sample from a second dataset object.
  TinyRoot t;
  auto cfg = t.config();
  cfg.text_dropout = 0.5, cfg.cond_dropout = 0.3, cfg.mask_p = 0.9, cfg.seed = 11;
  SftDataset a(cfg), b(cfg);
  for (int64_t epoch = 0; epoch < 4; ++epoch)
    for (size_t i = 0; i < a.size(); ++i) {
      const auto x = a.get(i, epoch), y = b.get(i, epoch);
      const auto d = draw_sft(11, epoch, static_cast<int64_t>(i), 0.5, 0.3, 0.9);
      EXPECT_EQ(x.text_drop, d.text_drop);
      EXPECT_EQ(x.cond_drop, d.cond_drop);
      EXPECT_EQ(x.mask_frac > 0, d.mask);
      EXPECT_TRUE(torch::equal(x.ids, y.ids));
      EXPECT_EQ(x.text_rows, y.text_rows);
      EXPECT_EQ(x.mask_frac, y.mask_frac);
    }
}

TEST(DataSft, ApplyWorldMaskKnownRectangle) {
  SftDraws d;
  d.mask = true;
  d.x0 = 0, d.x1 = 0.5, d.y0 = 0, d.y1 = 0.5;
  auto ids = torch::zeros({2, 8, 8}, torch::kByte);
  // Frame 0: identity -> the top-left quarter. Frame 1: u = 0.5 x -> world [0, 0.5] is image [0, 0.25].
  const double frac = apply_world_mask(ids, {kIdentityAffine, {0.5, 0, 0, 0, 0.5, 0}}, d);
  EXPECT_EQ(ids[0].eq(255).sum().item<int64_t>(), 16);
  EXPECT_TRUE(torch::all(ids[0].slice(0, 0, 4).slice(1, 0, 4) == 255).item<bool>());
  EXPECT_EQ(ids[1].eq(255).sum().item<int64_t>(), 4);
  EXPECT_TRUE(torch::all(ids[1].slice(0, 0, 2).slice(1, 0, 2) == 255).item<bool>());
  EXPECT_DOUBLE_EQ(frac, 20.0 / 128.0);
}

TEST(DataSft, MaskAnchoredInWorldCoordinates) {
  TinyRoot t;
  t.write_ids("t0", torch::zeros({3, 8, 8}, torch::kByte));
  // Frame 1: the camera moved so the world appears 0.25 (2 pixels) further right; frame 2: 0.25 further down.
  t.write_meta("t0", {kIdentityAffine, {1, 0, 0.25, 0, 1, 0}, {1, 0, 0, 0, 1, 0.25}});
  auto cfg = t.config();
  cfg.text_dropout = cfg.cond_dropout = 0, cfg.mask_p = 1;
  SftDataset ds(cfg);
  int checked = 0;
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    const auto s = ds.get(0, epoch);
    const auto m = s.ids.eq(255);  // [3, 8, 8]
    ASSERT_GT(m[0].sum().item<int64_t>(), 0);
    EXPECT_DOUBLE_EQ(s.mask_frac, m.sum().item<int64_t>() / 192.0);
    EXPECT_TRUE(torch::equal(m[1].slice(1, 2, 8), m[0].slice(1, 0, 6))) << "epoch " << epoch;
    EXPECT_TRUE(torch::equal(m[2].slice(0, 2, 8), m[0].slice(0, 0, 6))) << "epoch " << epoch;
    // A mask fixed in image space would be identical in every frame; the anchored one moved.
    checked += !torch::equal(m[1], m[0]);
  }
  EXPECT_GT(checked, 0);
}

TEST(DataSft, CollateDedupsContext) {
  TinyRoot t;
  SftDataset ds(t.config());
  std::vector<SftSample> s = {ds.get_with(0, false, false), ds.get_with(3, false, false), ds.get_with(1, true, true)};
  const auto b = collate(s, *ds.text_table());
  EXPECT_EQ(b.clip_ids, (std::vector<std::string>{"t0", "t3", "t1"}));
  EXPECT_EQ(b.latents.sizes(), (std::vector<int64_t>{3, 4, 3, 4, 4}));
  EXPECT_EQ(b.ids.sizes(), (std::vector<int64_t>{3, 3, 8, 8}));
  EXPECT_EQ(b.context.sizes(), (std::vector<int64_t>{3, 4, 8}));  // rows 1, 2 and the null row 0
  EXPECT_EQ(b.context_ids.scalar_type(), torch::kLong);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_TRUE(
          torch::equal(b.context[b.context_ids[i][c].item<int64_t>()], ds.text_table()->rows({s[i].text_rows[c]})[0]));
  EXPECT_EQ(b.text_drop[2].item<float>(), 1.0f);
  EXPECT_EQ(b.cond_drop[0].item<float>(), 0.0f);
  EXPECT_EQ(b.mask_frac.scalar_type(), torch::kFloat);
  const auto pinned = b.pin_memory();
  EXPECT_TRUE(torch::equal(pinned.latents, b.latents));
}

// A broken meta/<clip>.json stops the run when the train set is built, not when the clip is first masked.
TEST(DataSft, ABrokenMetaFileFailsAtStartUpNamingIt) {
  TinyRoot t;
  TinyRoot::write_text(t.meta("t2"), "{\"world_to_image\": [[1, 0");
  auto cfg = t.config();
  cfg.mask_p = 0.5;
  expect_error([&] { SftDataset ds(cfg); }, {t.meta("t2")});
  cfg.mask_p = 0;  // never masked: the file is never read
  SftDataset ds(cfg);
}

// The leak check over the whole index: a leak among rows the run does not use (dropped, past --limit or --val_n)
// is still a leak.
TEST(DataSft, TheRootLeakCheckCoversEveryRow) {
  TinyRoot t;
  t.clips()[7].run = "rA";  // v2, a dropped val row, shares run rA with train
  t.write_index();
  SftDataset train(t.config()), val(t.config("val"));
  for (const auto& c : val.clip_ids()) EXPECT_NE(c, "v2");  // the used rows do not show it
  expect_error([&] { check_no_leak(train.root()); }, {"clips.jsonl", "leak", "1 run(s)", "'rA'", "v2"});
}

}  // namespace
}  // namespace vdt
