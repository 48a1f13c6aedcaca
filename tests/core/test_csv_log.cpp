// CsvLog: header once, append on reopen, rotation to .old0/.old1 when the header changes, escaping, errors.
#include "core/csv_log.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "test_util.h"

namespace vdt {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CsvLog, HeaderOnceAndAppendOnReopen) {
  test::TempDir tmp;
  const std::string path = tmp.file("train_log.csv");
  {
    CsvLog log(path, {"step", "loss", "lr"});
    EXPECT_FALSE(log.rotated().has_value());
    log.write({{"step", "1"}, {"loss", fmt_num(0.5)}, {"lr", fmt_num(1e-5)}});
    log.write({{"step", "2"}, {"lr", "0.1"}});  // loss missing -> empty
  }
  EXPECT_EQ(slurp(path), "step,loss,lr\n1,0.5,1e-05\n2,,0.1\n");
  {
    CsvLog log(path, {"step", "loss", "lr"});
    EXPECT_FALSE(log.rotated().has_value());
    log.write_values({"3", "0.25", "0.1"});
    log.flush();
  }
  EXPECT_EQ(slurp(path), "step,loss,lr\n1,0.5,1e-05\n2,,0.1\n3,0.25,0.1\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.file("train_log.old0.csv")));
}

TEST(CsvLog, EmptyExistingFileGetsHeaderWithoutRotation) {
  test::TempDir tmp;
  const std::string path = tmp.file("val_log.csv");
  std::ofstream(path).close();
  CsvLog log(path, {"a", "b"});
  EXPECT_FALSE(log.rotated().has_value());
  log.write_values({"1", "2"});
  EXPECT_EQ(slurp(path), "a,b\n1,2\n");
}

TEST(CsvLog, PartialLastLineIsNotGluedTo) {
  test::TempDir tmp;
  const std::string path = tmp.file("log.csv");
  std::ofstream(path) << "a,b\n1,2\n3,";  // a crash mid-row
  CsvLog log(path, {"a", "b"});
  log.write_values({"5", "6"});
  EXPECT_EQ(slurp(path), "a,b\n1,2\n3,\n5,6\n");
}

TEST(CsvLog, RotatesWhenHeaderChanges) {
  test::TempDir tmp;
  const std::string path = tmp.file("train_log.csv");
  {
    CsvLog log(path, {"step", "loss"});
    log.write_values({"1", "0.5"});
  }
  {
    CsvLog log(path, {"step", "loss", "mse"});
    ASSERT_TRUE(log.rotated().has_value());
    EXPECT_EQ(*log.rotated(), tmp.file("train_log.old0.csv"));
    log.write_values({"2", "0.4", "0.3"});
  }
  EXPECT_EQ(slurp(tmp.file("train_log.old0.csv")), "step,loss\n1,0.5\n");
  EXPECT_EQ(slurp(path), "step,loss,mse\n2,0.4,0.3\n");
  {
    CsvLog log(path, {"loss", "step", "mse"});  // reordered columns are a different header too
    ASSERT_TRUE(log.rotated().has_value());
    EXPECT_EQ(*log.rotated(), tmp.file("train_log.old1.csv"));
  }
  EXPECT_EQ(slurp(tmp.file("train_log.old0.csv")), "step,loss\n1,0.5\n");
  EXPECT_EQ(slurp(tmp.file("train_log.old1.csv")), "step,loss,mse\n2,0.4,0.3\n");
  EXPECT_EQ(slurp(path), "loss,step,mse\n");
}

TEST(CsvLog, Escaping) {
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape(""), "");
  EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_escape("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_escape("cr\r"), "\"cr\r\"");
  test::TempDir tmp;
  const std::string path = tmp.file("log.csv");
  {
    CsvLog log(path, {"step", "clips"});
    log.write({{"step", "1"}, {"clips", "c1;c2,c3"}});
  }
  EXPECT_EQ(slurp(path), "step,clips\n1,\"c1;c2,c3\"\n");
  CsvLog again(path, {"step", "clips"});
  EXPECT_FALSE(again.rotated().has_value());
}

TEST(CsvLog, FmtNum) {
  EXPECT_EQ(fmt_num(0.5), "0.5");
  EXPECT_EQ(fmt_num(3), "3");
  EXPECT_EQ(fmt_num(1234567.0), "1.23457e+06");
  EXPECT_EQ(fmt_num(2e-5), "2e-05");
  EXPECT_EQ(fmt_num(std::nan("")), "nan");
  EXPECT_EQ(fmt_num(-std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(fmt_num(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(fmt_num(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(CsvLog, Errors) {
  test::TempDir tmp;
  const std::string path = tmp.file("train_log.csv");
  CsvLog log(path, {"step", "loss"});
  test::expect_error([&] { log.write({{"step", "1"}, {"los", "0.5"}}); }, {"los", path, "unknown column"});
  test::expect_error([&] { log.write_values({"1"}); }, {path, "1 values", "2 columns"});
  test::expect_error([&] { CsvLog dup(tmp.file("d.csv"), {"a", "a"}); }, {"duplicate column 'a'"});
  test::expect_error([&] { CsvLog bad(tmp.file("no/such/dir/x.csv"), {"a"}); }, {"no/such/dir/x.csv"});
  EXPECT_EQ(slurp(path), "step,loss\n");  // failed writes left nothing behind
}

TEST(CsvLog, KeepRowsThroughDropsRowsLoggedAfterTheResumedStep) {
  test::TempDir d;
  const auto path = d.file("train_log.csv");
  {
    CsvLog log(path, {"step", "loss"});
    for (int s = 1; s <= 5; ++s) log.write_values({std::to_string(s), "0.5"});
  }
  EXPECT_EQ(CsvLog::keep_rows_through(path, 3), 2);
  EXPECT_EQ(CsvLog::keep_rows_through(path, 3), 0);
  EXPECT_EQ(CsvLog::keep_rows_through(d.file("missing.csv"), 3), 0);
  CsvLog log(path, {"step", "loss"});  // same header: appends after step 3
  log.write_values({"4", "0.25"});
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "step,loss\n1,0.5\n2,0.5\n3,0.5\n4,0.25\n");
}

}  // namespace
}  // namespace vdt
