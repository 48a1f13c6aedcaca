// DataRoot parsing (dataset.json, clips.jsonl), config validation and check_root's problem list.
#include <gtest/gtest.h>

#include "data/data_root.h"
#include "data/sft_dataset.h"
#include "data_test_util.h"

namespace vdt {
namespace {

using test::expect_error;
using test::TinyRoot;

TEST(DataRoot, OpensValidRoot) {
  TinyRoot t;
  const auto r = DataRoot::open(t.root() + "/");
  EXPECT_EQ(r.root(), t.root());
  EXPECT_EQ(r.info().res, "832x480");
  EXPECT_EQ(r.info().latent_h, 4);
  EXPECT_EQ(r.info().latent_w, 4);
  EXPECT_EQ(r.info().collapse_parts.size(), 20u);
  EXPECT_EQ(r.num_parts(), 20);
  ASSERT_EQ(r.rows().size(), 8u);
  EXPECT_EQ(r.rows()[4].clip_id, "t4");
  EXPECT_TRUE(r.rows()[4].drop);
  EXPECT_EQ(r.rows()[4].line, 5);
  EXPECT_EQ(r.latent_path("t0"), t.latent("t0"));
  EXPECT_EQ(r.cond_path("t0"), t.cond("t0"));
  EXPECT_EQ(r.meta_path("t0"), t.meta("t0"));
}

TEST(DataRoot, VocabSizeAndResParse) {
  EXPECT_EQ(vocab_size("parts"), 20);
  EXPECT_EQ(vocab_size("ids"), 10);
  expect_error([] { vocab_size("words"); }, {"--vocab", "words"});
  EXPECT_EQ(parse_res("832x480", "--res"), (std::pair<int64_t, int64_t>{832, 480}));
  expect_error([] { parse_res("832*480", "--res"); }, {"--res", "832*480"});
  expect_error([] { parse_res("x480", "--res"); }, {"--res"});
}

TEST(DataRoot, ConfigValidateNamesFlag) {
  SftDataConfig c;
  c.root = "/x";
  c.validate();
  auto with = [&](auto fn) {
    SftDataConfig b = c;
    fn(b);
    return b;
  };
  expect_error([&] { with([](auto& b) { b.text_dropout = 1.5; }).validate(); }, {"--text_dropout", "1.5"});
  expect_error([&] { with([](auto& b) { b.cond_dropout = -0.1; }).validate(); }, {"--cond_dropout"});
  expect_error([&] { with([](auto& b) { b.mask_p = 2; }).validate(); }, {"--mask_p"});
  expect_error([&] { with([](auto& b) { b.vocab = "x"; }).validate(); }, {"--vocab"});
  expect_error([&] { with([](auto& b) { b.res = "big"; }).validate(); }, {"--res", "big"});
  expect_error([&] { with([](auto& b) { b.limit = -1; }).validate(); }, {"--limit"});
  expect_error([&] { with([](auto& b) { b.root = ""; }).validate(); }, {"--data_root"});
}

TEST(DataRoot, MalformedJsonlLineNamesFileAndLine) {
  TinyRoot t;
  std::ifstream in(t.file("index/clips.jsonl"));
  std::string all((std::istreambuf_iterator<char>(in)), {});
  TinyRoot::write_text(t.file("index/clips.jsonl"), all + "{\"clip_id\": \"x\", \"split\": \n");
  expect_error([&] { DataRoot::open(t.root()); }, {"clips.jsonl:9", "malformed JSON"});
  // Wrong field types or values, each naming its line.
  TinyRoot::write_text(t.file("index/clips.jsonl"),
                       all + R"({"clip_id":"x","split":"test","run":"r","cells":["","",""]})");
  expect_error([&] { DataRoot::open(t.root()); }, {"clips.jsonl:9", "split"});
  TinyRoot::write_text(t.file("index/clips.jsonl"), R"({"clip_id":"x","split":"train","run":"r","cells":[""]})");
  expect_error([&] { DataRoot::open(t.root()); }, {"clips.jsonl:1", "cells = 3"});
  TinyRoot::write_text(t.file("index/clips.jsonl"), all + all);
  expect_error([&] { DataRoot::open(t.root()); }, {"clips.jsonl:9", "'t0'", "twice"});
}

TEST(DataRoot, BadDatasetJsonNamesKey) {
  TinyRoot t;
  t.info().erase("latent_hw");
  t.write_dataset_json();
  expect_error([&] { DataRoot::open(t.root()); }, {"dataset.json", "latent_hw"});
  t.info()["latent_hw"] = {4, 4};
  t.info()["format"] = "vdt-latents/9";
  t.write_dataset_json();
  expect_error([&] { DataRoot::open(t.root()); }, {"dataset.json", "vdt-latents/1"});
  t.info()["format"] = "vdt-latents/1";
  t.info()["collapse_parts"] = {1, 2};
  t.write_dataset_json();
  expect_error([&] { DataRoot::open(t.root()); }, {"dataset.json", "collapse_parts"});
  TinyRoot::write_text(t.file("dataset.json"), "{not json");
  expect_error([&] { DataRoot::open(t.root()); }, {"dataset.json", "malformed JSON"});
  std::filesystem::remove(t.file("dataset.json"));
  expect_error([&] { DataRoot::open(t.root()); }, {"dataset.json", "cannot open"});
}

TEST(DataRoot, CheckRootHealthyIsEmpty) {
  TinyRoot t;
  const auto problems = check_root(t.root(), "", "832x480");
  EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST(DataRoot, CheckRootReportsEveryProblemWithItsFile) {
  TinyRoot t;
  std::filesystem::remove(t.latent("t0"));                      // missing latent
  t.write_ids("t1", torch::full({3, 8, 8}, 21, torch::kByte));  // id out of range
  auto lat = TinyRoot::latents_for(2);
  lat[0][1][2][3] = std::numeric_limits<float>::quiet_NaN();
  t.write_latents("t2", lat);                                // NaN
  t.write_ids("t3", torch::zeros({3, 4, 4}, torch::kByte));  // wrong ids shape
  t.clips()[5].run = "rA";                                   // run leak
  t.clips()[6].cells[1] = "a purple whale";                  // prompt not in table
  t.write_index();
  const auto p = check_root(t.root(), "", "1280x704");
  std::string all;
  for (const auto& s : p) all += s + "\n";
  auto has = [&](std::initializer_list<std::string> parts) {
    for (const auto& line : p) {
      bool ok = true;
      for (const auto& s : parts) ok = ok && line.find(s) != std::string::npos;
      if (ok) return true;
    }
    return false;
  };
  EXPECT_TRUE(has({t.latent("t0"), "missing latent file"})) << all;
  EXPECT_TRUE(has({t.cond("t1"), "frame 0", "id 21"})) << all;
  EXPECT_TRUE(has({t.latent("t2"), "NaN/Inf"})) << all;
  EXPECT_TRUE(has({t.cond("t3"), "shape [3, 4, 4]", "[>=3, 8, 8]"})) << all;
  EXPECT_TRUE(has({"clips.jsonl", "leak", "run 'rA'"})) << all;
  EXPECT_TRUE(has({"clips.jsonl:7", "v1", "cell 1", "a purple whale"})) << all;
  EXPECT_TRUE(has({"dataset.json", "832x480", "1280x704"})) << all;
  EXPECT_EQ(p.size(), 7u) << all;
  for (const auto& line : p) EXPECT_EQ(line.find('\n'), std::string::npos) << "one line each: " << line;
}

TEST(DataRoot, CheckRootLeakByClipAndBadMeta) {
  TinyRoot t;
  t.clips()[5].clip_id = "t0";
  t.write_index();
  t.write_meta("t1", {{1, 0, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 1, 0}});
  const auto p = check_root(t.root());
  ASSERT_EQ(p.size(), 2u);
  EXPECT_NE(p[0].find("clip 't0' is in train (line 1) and val (line 6)"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find(t.meta("t1")), std::string::npos) << p[1];
  EXPECT_NE(p[1].find("frame 1 is not invertible"), std::string::npos) << p[1];
}

TEST(DataRoot, CheckRootBadDatasetJsonIsOneProblem) {
  TinyRoot t;
  TinyRoot::write_text(t.file("dataset.json"), "{\"format\": 1");
  auto p = check_root(t.root());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find(t.file("dataset.json") + ": malformed JSON"), std::string::npos) << p[0];
  std::filesystem::remove(t.file("dataset.json"));
  p = check_root(t.root());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].find('\n'), std::string::npos) << p[0];
  p = check_root(t.root() + "/nowhere");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("not a directory"), std::string::npos) << p[0];
}

}  // namespace
}  // namespace vdt
