// TextTable: lookup by prompt, row copies, and its validation errors.
#include <gtest/gtest.h>

#include "data/text_table.h"

#include <limits>
#include "data_test_util.h"

namespace vdt {
namespace {

using test::expect_error;
using test::TinyRoot;

TEST(TextTable, LookupAndRows) {
  TinyRoot t;
  const auto table = TextTable::open(t.table());
  EXPECT_EQ(table->size(), 4);
  EXPECT_EQ(table->text_len(), TinyRoot::kLt);
  EXPECT_EQ(table->text_dim(), TinyRoot::kTextDim);
  EXPECT_TRUE(table->contains(""));
  EXPECT_FALSE(table->contains("a cat"));
  EXPECT_EQ(table->row_of("a dog"), 3);
  EXPECT_EQ(table->length(3), 4);
  const auto rows = table->rows({2, 0, 2});
  EXPECT_EQ(rows.sizes(), (std::vector<int64_t>{3, TinyRoot::kLt, TinyRoot::kTextDim}));
  EXPECT_EQ(rows.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(rows[0][0][0].item<float>(), 3.0f);
  EXPECT_EQ(rows[0][2][0].item<float>(), 3.0f);  // row 2 has length 3
  EXPECT_EQ(rows[0][3][0].item<float>(), 0.0f);  // padding
  EXPECT_EQ(rows[1][0][0].item<float>(), 1.0f);
  EXPECT_EQ(table->path(), t.table());
}

TEST(TextTable, MissingPromptNamesPromptAndFile) {
  TinyRoot t;
  const auto table = TextTable::open(t.table());
  expect_error([&] { table->row_of("a cat"); }, {"\"a cat\"", t.table(), "not in the text table"});
  expect_error([&] { table->rows({4}); }, {"row 4", t.table()});
}

TEST(TextTable, ValidationErrors) {
  TinyRoot t;
  t.prompts().push_back("a dog");  // duplicate
  t.write_text_table();
  expect_error([&] { TextTable::open(t.table()); }, {t.table(), "\"a dog\"", "twice"});
  save_safetensors(t.table(), {{"embeddings", torch::zeros({2, 4, 8})}, {"lengths", torch::zeros({2}, torch::kInt)}},
                   {{"prompts", "[\"\", \"x\"]"}});
  expect_error([&] { TextTable::open(t.table()); }, {t.table(), "'embeddings'", "F32", "BF16"});
  save_safetensors(
      t.table(),
      {{"embeddings", torch::zeros({2, 4, 8}, torch::kBFloat16)}, {"lengths", torch::zeros({2}, torch::kInt)}},
      {{"prompts", "[\"\"]"}});
  expect_error([&] { TextTable::open(t.table()); }, {t.table(), "lists 1 prompts", "2 rows"});
  save_safetensors(t.table(), {{"embeddings", torch::zeros({2, 4, 8}, torch::kBFloat16)}});
  expect_error([&] { TextTable::open(t.table()); }, {t.table(), "'lengths'"});
}

// A NaN or Inf embedding is found when the table is opened (by `vdt data check` and at a trainer's start-up), not
// as a NaN loss hours later; the error names the file, the row and its prompt.
TEST(TextTable, NonFiniteEmbeddingsAreRefusedNamingTheRowAndPrompt) {
  TinyRoot t;
  auto f = SafetensorsFile::open(t.table());
  auto emb = f->get("embeddings").clone();
  const auto lengths = f->get("lengths").clone();
  const auto prompts = f->metadata().at("prompts");
  f.reset();
  emb[2][0][3] = std::numeric_limits<float>::quiet_NaN();
  emb[2][1][0] = std::numeric_limits<float>::infinity();
  save_safetensors(t.table(), {{"embeddings", emb}, {"lengths", lengths}}, {{"prompts", prompts}});
  expect_error([&] { TextTable::open(t.table()); }, {t.table(), "row 2", "\"a blue tree\"", "2 NaN/Inf"});
  const auto r = test::run_vdt("data check " + t.root());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("NaN/Inf"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vdt
