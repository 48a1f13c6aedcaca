// What the pages state about a run, held to what tiny runs write: the causal span on each base (docs/causal.md
// "Data", against the LoRA file's metadata), the window count rule (against the dataset on Wan and H3 roots), the
// files each trainer writes into its run directory (docs/causal.md "Files in --out", docs/cli.md "Outputs of a run")
// and the columns or keys of its logs. A statement that drifts from the code fails here until the page follows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "core/safetensors.h"
#include "data/causal_dataset.h"
#include "test_util.h"
#include "tools/synth.h"
#include "train/causal/causal_trainer.h"
#include "train/causal_test_util.h"
#include "train/sft_test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

std::string page(const std::string& rel) {
  const auto repo = fs::path(VDT_TEST_ASSETS).parent_path().parent_path();
  std::ifstream f(repo / rel);
  EXPECT_TRUE(f.good()) << rel;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The cells of the table rows after `heading` (up to the next heading): row -> cells, in order.
std::vector<std::vector<std::string>> table_after(const std::string& text, const std::string& heading) {
  const auto at = text.find(heading);
  EXPECT_NE(at, std::string::npos) << heading;
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text.substr(at + heading.size()));
  bool started = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#", 0) == 0) break;
    if (line.rfind("|", 0) != 0) {
      if (started) break;
      continue;
    }
    started = true;
    if (line.rfind("|---", 0) == 0 || line.rfind("| file |", 0) == 0) continue;
    std::vector<std::string> cells;
    size_t p = 1;
    for (size_t q; (q = line.find(" |", p)) != std::string::npos; p = q + 2) cells.push_back(line.substr(p, q - p));
    rows.push_back(cells);
  }
  return rows;
}

std::vector<std::string> backticked(const std::string& cell) {
  std::vector<std::string> out;
  static const std::regex tick("`([^`]+)`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), tick); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

// A page's file name pattern as a regex: NNNNN / N / <N> are digits, * anything.
std::regex pattern_regex(const std::string& pattern) {
  std::string r;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (pattern.compare(i, 3, "<N>") == 0) {
      r += "[0-9]+", i += 2;
    } else if (c == 'N' && (i + 1 == pattern.size() || !std::isalpha(static_cast<unsigned char>(pattern[i + 1])) ||
                            pattern[i + 1] == 'N')) {
      while (i + 1 < pattern.size() && pattern[i + 1] == 'N') ++i;
      r += "[0-9]+";
    } else if (c == '*') {
      r += ".*";
    } else if (std::string(".()[]{}+?^$|\\").find(c) != std::string::npos) {
      r += std::string("\\") + c;
    } else {
      r += c;
    }
  }
  return std::regex(r);
}

// The run directory's entries (not hidden), a directory as "name/" plus "name/<file>" for each file in it.
std::set<std::string> run_entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name[0] == '.') continue;  // .vdt.lock (docs/resume.md)
    if (e.is_directory() && !e.is_symlink()) {
      out.insert(name + "/");
      for (const auto& f : fs::directory_iterator(e.path())) out.insert(name + "/" + f.path().filename().string());
    } else {
      out.insert(name);
    }
  }
  return out;
}

// Every top-level entry is named by some row of the page's table, and every row names something the run wrote
// (except `absent`: what this run cannot make).
void expect_files_match(const std::set<std::string>& entries, const std::vector<std::vector<std::string>>& rows,
                        const std::set<std::string>& absent, const std::string& where) {
  std::vector<std::string> patterns;
  for (const auto& row : rows)
    for (const auto& p : backticked(row.at(0))) patterns.push_back(p);
  ASSERT_GE(patterns.size(), 5u) << where;
  for (const auto& e : entries) {
    if (e.find('/') != std::string::npos && e.back() != '/') continue;  // inside a directory: its row says
    const bool named = std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) {
      const std::string top = p.substr(0, p.find('/'));
      return std::regex_match(e, pattern_regex(p)) || (e.back() == '/' && top + "/" == e);
    });
    EXPECT_TRUE(named) << where << " does not name " << e;
  }
  for (const auto& p : patterns) {
    if (absent.count(p)) continue;
    const auto re = pattern_regex(p);
    EXPECT_TRUE(
        std::any_of(entries.begin(), entries.end(), [&](const std::string& e) { return std::regex_match(e, re); }))
        << where << " names " << p << ", which the run did not write";
  }
}

std::vector<std::string> csv_header(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
  return out;
}

std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string c; std::getline(ss, c, ',');) out.push_back(c.substr(c.find_first_not_of(' ')));
  return out;
}

const std::vector<std::string>& row_named(const std::vector<std::vector<std::string>>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.at(0).find("`" + name + "`") != std::string::npos) return r;
  ADD_FAILURE() << "no row for " << name;
  static const std::vector<std::string> none = {"", ""};
  return none;
}

class DocNumbers : public test::SuiteDirTest<DocNumbers> {
 public:
  static void write_suite_files(const test::TempDir& dir) {
    auto wan = test::wan_causal_root(dir.file("wan"));
    wan.latent_frames = 20;  // one 18-frame span of 3-frame chunks per clip
    synth_root(wan);
    synth_root(test::h3_causal_root(dir.file("h3"), /*train_runs=*/2));
  }
};

// docs/causal.md: "A span is 6 × --chunk-frames latent frames: 18 on Wan (3-frame chunks) and 30 on MiniMax-H3
// (5-frame chunks ...)": what a run with the natural chunk records in its LoRA file.
TEST_F(DocNumbers, CausalSpanOnEachBaseIsWhatARunRecords) {
  const auto text = page("docs/causal.md");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m,
                                std::regex("(\\d+) on Wan \\((\\d+)-frame chunks\\) and (\\d+) on MiniMax-H3\\s+"
                                           "\\((\\d+)-frame chunks")))
      << "docs/causal.md no longer states the span per base";
  const std::vector<std::tuple<std::string, std::string, int64_t, int64_t>> runs = {
      {"wan", "tiny", std::stoll(m[1]), std::stoll(m[2])}, {"h3", "h3-tiny", std::stoll(m[3]), std::stoll(m[4])}};
  for (const auto& [root, model, span, chunk] : runs) {
    auto c = test::causal_test_run(dir_->file(root), dir_->file("span_" + root), model, /*chunk_frames=*/0, 1);
    c.val_clips = 1, c.init_lora = CausalConfig::kNoInitLora;
    train_causal(c);
    const auto meta = SafetensorsFile::open(lora_step_path(c.out, 1))->metadata();
    EXPECT_EQ(std::stoll(meta.at("chunk_frames")), chunk) << model;
    EXPECT_EQ(std::stoll(meta.at("span_chunks")) * std::stoll(meta.at("chunk_frames")), span) << model;
  }
}

// docs/causal.md "Data": windows start on multiples of a (1 on Wan, 5 on MiniMax-H3), slots s = span rounded up to a
// multiple of a apart, floor((F − span) / s) + 1 windows per clip: the dataset's count on both roots and several
// spans.
TEST_F(DocNumbers, WindowCountRuleIsTheDatasets) {
  const auto text = page("docs/causal.md");
  for (const char* said : {"1 on Wan, 5 on MiniMax-H3", "floor((F − span) / s) + 1 train windows"})
    EXPECT_NE(text.find(said), std::string::npos) << "docs/causal.md no longer says: " << said;
  for (const auto& [root, align, spans] : std::vector<std::tuple<std::string, int64_t, std::vector<int64_t>>>{
           {"wan", 1, {6, 9, 18}}, {"h3", 5, {6, 12, 30}}}) {
    for (const int64_t span : spans) {
      CausalDataConfig dc;
      dc.root = dir_->file(root), dc.span_frames = span, dc.val_clips = 1, dc.seed = 0;
      const CausalDataset ds(dc);
      const int64_t s = (span + align - 1) / align * align;
      int64_t want = 0;
      for (const auto& clip : ds.clips()) want += (clip.frames - span) / s + 1;
      EXPECT_EQ(static_cast<int64_t>(ds.train().size() + ds.val().size()), want) << root << " span " << span;
    }
  }
}

// docs/causal.md "Files in --out": every file a run with validation and a preview writes is in the table, every row
// is written; train_log.jsonl and val_log.jsonl have the keys the table names.
TEST_F(DocNumbers, CausalRunWritesTheFilesItsPageLists) {
  auto c = test::causal_test_run(dir_->file("wan"), dir_->file("files_causal"), "tiny", 0, 4);
  c.val_clips = 1, c.val_every = 2, c.preview_steps = 1, c.save_every = 2;  // two saves: both state slots
  train_causal(c);
  const auto rows = table_after(page("docs/causal.md"), "## Files in `--out`");
  expect_files_match(run_entries(c.out), rows, {}, "docs/causal.md (Files in --out)");
  auto keys_of = [&](const std::string& file) {
    std::set<std::string> out;
    for (const auto& k : backticked(row_named(rows, file).at(1)))
      if (k.rfind("--", 0) != 0) out.insert(k);
    return out;
  };
  std::set<std::string> train_keys, val_keys;
  const auto train_rows = test::read_jsonl(c.out + "/train_log.jsonl");  // kept: the loops iterate into them
  const auto val_rows = test::read_jsonl(c.out + "/val_log.jsonl");
  ASSERT_FALSE(train_rows.empty() || val_rows.empty());
  for (const auto& [k, v] : train_rows.front().items()) train_keys.insert(k);
  for (const auto& [k, v] : val_rows.front().items()) val_keys.insert(k);
  EXPECT_EQ(keys_of("train_log.jsonl"), train_keys);
  EXPECT_EQ(keys_of("val_log.jsonl"), val_keys);
}

// docs/cli.md "Outputs of a run": the SFT run's files and its CSVs' columns.
TEST_F(DocNumbers, SftRunWritesTheFilesItsPageLists) {
  const std::string res = test::write_sft_root(dir_->file("sft_data"));
  auto c = test::sft_test_run(dir_->file("sft_data"), res, dir_->file("files_sft"), 4);
  c.val_every = 2, c.val_n = 1, c.preview_steps = 1;  // saves at steps 2 and 4: both state slots
  train_sft(c);
  const auto rows = table_after(page("docs/cli.md"), "## Outputs of a run");
  expect_files_match(run_entries(c.output), rows, {"config_resume<N>.json"}, "docs/cli.md (Outputs of a run)");
  for (const char* csv : {"train_log.csv", "val_log.csv"}) {
    const auto cell = row_named(rows, csv).at(1);
    const auto listed = backticked(cell);
    ASSERT_FALSE(listed.empty()) << csv;
    EXPECT_EQ(comma_list(listed.front()), csv_header(c.output + "/" + csv)) << csv;
  }
}

}  // namespace
}  // namespace vdt
