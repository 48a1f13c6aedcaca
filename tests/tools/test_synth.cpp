// `vdt data synth`: the root's files, shapes and dtypes; splits and drop rows; determinism; the linear VAE's
// round trip; and that ids and text carry the information the latents need (the root is learnable).
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/safetensors.h"
#include "test_util.h"
#include "tools/synth.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_error;
using test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<json> read_index(const std::string& root) {
  std::vector<json> rows;
  std::istringstream in(slurp(root + "/index/clips.jsonl"));
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

torch::Tensor load(const std::string& path, const std::string& key) {
  return SafetensorsFile::open(path)->get(key).clone();
}

// One default root shared by the read-only tests (written once: the suite stays fast).
class SynthRoot : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    SynthConfig cfg;
    cfg.out = dir_->file("root");
    report_ = synth_root(cfg);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string root() { return dir_->file("root"); }
  static TempDir* dir_;
  static SynthReport report_;
};
TempDir* SynthRoot::dir_ = nullptr;
SynthReport SynthRoot::report_;

TEST_F(SynthRoot, FilesShapesAndDtypes) {
  const SynthConfig d;
  const auto ds = json::parse(slurp(root() + "/dataset.json"));
  EXPECT_EQ(ds["format"], "vdt-latents/1");
  EXPECT_EQ(ds["res"], "128x128");
  EXPECT_EQ(report_.res, "128x128");
  EXPECT_EQ(ds["latent_channels"], 16);
  EXPECT_EQ(ds["latent_frames"], 5);
  EXPECT_EQ(ds["cells"], 5);
  EXPECT_EQ(ds["latent_hw"], json({8, 8}));
  EXPECT_EQ(ds["sem_scale"], 2);
  EXPECT_EQ(ds["vocab"], "parts");
  EXPECT_EQ(ds["text_dim"], 64);
  EXPECT_EQ(ds["text_len"], 16);
  EXPECT_EQ(ds["null_prompt"], "");
  ASSERT_EQ(ds["collapse_parts"].size(), 20u);
  for (const auto& v : ds["collapse_parts"]) EXPECT_TRUE(v.get<int>() >= 0 && v.get<int>() <= 9);

  const auto rows = read_index(root());
  ASSERT_EQ(rows.size(), 28u);
  for (const auto& r : rows) {
    const std::string id = r["clip_id"];
    ASSERT_EQ(r["cells"].size(), 5u) << id;
    const auto lat = SafetensorsFile::open(root() + "/latents/" + id + ".safetensors");
    EXPECT_EQ(lat->keys(), std::vector<std::string>{"latents"});
    EXPECT_EQ(lat->entry("latents").dtype, "BF16");
    EXPECT_EQ(lat->entry("latents").shape, (std::vector<int64_t>{16, 5, 8, 8}));
    const auto ids = load(root() + "/cond/" + id + ".safetensors", "ids");
    EXPECT_EQ(ids.scalar_type(), torch::kByte);
    EXPECT_EQ(ids.sizes(), (std::vector<int64_t>{5, 16, 16}));
    EXPECT_LE(ids.max().item<int>(), 19);
    EXPECT_GE((ids > 0).sum().item<int64_t>(), 5 * 16) << id << ": the parts should be visible";
    const auto meta = json::parse(slurp(root() + "/meta/" + id + ".json"));
    ASSERT_EQ(meta["world_to_image"].size(), 5u);
    for (const auto& m : meta["world_to_image"]) {
      ASSERT_EQ(m.size(), 2u);
      EXPECT_EQ(m[0].size(), 3u);
      EXPECT_EQ(m[1].size(), 3u);
    }
  }
  const auto tt = SafetensorsFile::open(root() + "/text_table.safetensors");
  const auto prompts = json::parse(tt->metadata().at("prompts")).get<std::vector<std::string>>();
  const auto emb = tt->get("embeddings");
  const auto len = tt->get("lengths");
  EXPECT_EQ(emb.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(len.scalar_type(), torch::kInt);
  EXPECT_EQ(emb.sizes(), (std::vector<int64_t>{report_.n_prompts, 16, 64}));
  EXPECT_EQ(len.size(0), report_.n_prompts);
  EXPECT_EQ(static_cast<int64_t>(prompts.size()), report_.n_prompts);
  const auto vae = SafetensorsFile::open(root() + "/vae.safetensors");
  EXPECT_EQ(vae->entry("encoder").dtype, "F32");
  EXPECT_EQ(vae->entry("encoder").shape, (std::vector<int64_t>{16, 12}));
  EXPECT_EQ(vae->entry("decoder").shape, (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(vae->metadata().at("sem_scale"), "2");
}

TEST_F(SynthRoot, TrainValFromDisjointRunsWithDropRows) {
  const auto rows = read_index(root());
  std::set<std::string> train_runs, val_runs, ids;
  int n_train = 0, n_val = 0, n_drop = 0;
  for (const auto& r : rows) {
    EXPECT_TRUE(ids.insert(r["clip_id"].get<std::string>()).second) << "duplicate clip " << r["clip_id"];
    if (r["split"] == "train") {
      ++n_train;
      train_runs.insert(r["run"].get<std::string>());
      n_drop += r["drop"].get<bool>();
    } else {
      EXPECT_EQ(r["split"], "val");
      EXPECT_FALSE(r["drop"].get<bool>());
      ++n_val;
      val_runs.insert(r["run"].get<std::string>());
    }
  }
  EXPECT_EQ(n_train, 24);
  EXPECT_EQ(n_val, 4);
  EXPECT_EQ(n_drop, 2);
  EXPECT_EQ(train_runs.size(), 6u);
  EXPECT_EQ(val_runs.size(), 2u);
  for (const auto& r : val_runs) EXPECT_EQ(train_runs.count(r), 0u) << "run " << r << " in both splits";
  EXPECT_EQ(report_.n_train, 24);
  EXPECT_EQ(report_.n_val, 4);
  EXPECT_EQ(report_.n_drop, 2);
}

TEST_F(SynthRoot, VaeRoundTripAndUnitScale) {
  const auto vae = SynthVae::open(root());
  EXPECT_EQ(vae.latent_channels(), 16);
  EXPECT_EQ(vae.sem_scale(), 2);
  double sq = 0;
  int64_t n = 0;
  for (const auto& r : read_index(root())) {
    const std::string id = r["clip_id"];
    const auto rgb = synth::ids_to_rgb(load(root() + "/cond/" + id + ".safetensors", "ids"));  // [F, 3, 16, 16]
    EXPECT_LT((vae.decode(vae.encode(rgb)) - rgb).abs().max().item<double>(), 1e-4) << id;
    const auto lat = load(root() + "/latents/" + id + ".safetensors", "latents");
    EXPECT_LT((vae.decode(lat) - rgb).abs().max().item<double>(), 0.03) << id << ": bf16 latents decode";
    sq += lat.to(torch::kDouble).square().sum().item<double>();
    n += lat.numel();
  }
  const double rms = std::sqrt(sq / n);
  EXPECT_NEAR(rms, 1.0, 0.05);
}

TEST_F(SynthRoot, IdsPredictLatentsFarBetterThanTheMean) {
  const auto vae = SynthVae::open(root());
  std::vector<torch::Tensor> lat, pred, floor;
  for (const auto& r : read_index(root())) {
    const std::string id = r["clip_id"];
    const auto ids = load(root() + "/cond/" + id + ".safetensors", "ids");
    lat.push_back(load(root() + "/latents/" + id + ".safetensors", "latents").to(torch::kFloat));
    pred.push_back(vae.encode(synth::ids_to_rgb(ids)));
    floor.push_back(vae.encode(synth::ids_to_rgb(torch::zeros_like(ids))));
  }
  const auto x = torch::stack(lat);                          // [N, C, F, H, W]
  const auto mean = x.mean({0, 2, 3, 4}, /*keepdim=*/true);  // per channel
  const double mse_mean = (x - mean).square().mean().item<double>();
  const double mse_ids = (x - torch::stack(pred)).square().mean().item<double>();
  const double mse_floor = (x - torch::stack(floor)).square().mean().item<double>();
  EXPECT_GT(mse_mean, 0.5);
  EXPECT_LT(mse_ids, 1e-3 * mse_mean) << "ids -> colours -> encode must reconstruct the latents";
  EXPECT_GT(mse_floor, 0.5 * mse_mean) << "the parts, not the floor, carry the latents' variance";
}

// The motions the text names, measured in the id maps: for every "id:dir" token of cell f (f >= 1), the part's
// world-space centroid displacement from frame f-1 to f (pixels mapped through the meta/ affine, so the camera pan
// cancels). Only parts of (nearly) the same size in both frames count: unoccluded and inside the view.
struct MotionCheck {
  std::map<std::string, std::vector<std::pair<double, double>>> by_dir;  // displacements per direction word
  int checked = 0, agree = 0;
};

MotionCheck check_motion(const std::string& root) {
  MotionCheck mc;
  const double step = 0.08 * 0.85;  // a part's speed in world units at the smallest zoom
  for (const auto& r : read_index(root)) {
    const std::string id = r["clip_id"];
    const auto ids = load(root + "/cond/" + id + ".safetensors", "ids");
    const auto w2i = json::parse(slurp(root + "/meta/" + id + ".json"))["world_to_image"];
    const int64_t hs = ids.size(1), ws = ids.size(2);
    const auto px = ids.accessor<uint8_t, 3>();
    auto centroid = [&](int p, int64_t f) {  // (x, y, pixel count) of part p in frame f, world coordinates
      const auto& m = w2i[f];
      const double a = m[0][0], b = m[0][1], c = m[0][2], d = m[1][0], e = m[1][1], g = m[1][2], det = a * e - b * d;
      double sx = 0, sy = 0;
      int64_t n = 0;
      for (int64_t row = 0; row < hs; ++row)
        for (int64_t col = 0; col < ws; ++col) {
          if (px[f][row][col] != p) continue;
          const double u = (col + 0.5) / ws - c, v = (row + 0.5) / hs - g;
          sx += (e * u - b * v) / det;
          sy += (-d * u + a * v) / det;
          ++n;
        }
      return std::make_tuple(n ? sx / n : 0.0, n ? sy / n : 0.0, n);
    };
    for (size_t f = 1; f < r["cells"].size(); ++f) {
      std::istringstream cell(r["cells"][f].get<std::string>());
      for (std::string tok; cell >> tok;) {
        const auto colon = tok.find(':');
        EXPECT_NE(colon, std::string::npos) << tok;
        if (colon == std::string::npos || tok.substr(0, colon) == "pan") continue;
        const int p = std::stoi(tok.substr(0, colon));
        const std::string dir = tok.substr(colon + 1);
        const auto [x0, y0, n0] = centroid(p, f - 1);
        const auto [x1, y1, n1] = centroid(p, f);
        if (n0 < 6 || std::abs(n1 - n0) > n0 / 10) continue;
        const double dx = x1 - x0, dy = y1 - y0;
        mc.by_dir[dir].emplace_back(dx, dy);
        bool ok = false;
        if (dir == "still") ok = std::hypot(dx, dy) < 0.5 * step;
        if (dir == "left") ok = dx < -0.5 * step && std::abs(dy) < 0.5 * step;
        if (dir == "right") ok = dx > 0.5 * step && std::abs(dy) < 0.5 * step;
        if (dir == "up") ok = dy < -0.5 * step && std::abs(dx) < 0.5 * step;
        if (dir == "down") ok = dy > 0.5 * step && std::abs(dx) < 0.5 * step;
        ++mc.checked;
        mc.agree += ok;
      }
    }
  }
  return mc;
}

// On the default root (16x16 ids, motion ~1.3 px a frame against 1 px quantisation) the mean displacement per
// direction word is the named motion.
TEST_F(SynthRoot, TextNamesTheMotionInTheIdsOnAverage) {
  const auto mc = check_motion(root());
  const double step = 0.08;
  const std::map<std::string, std::pair<double, double>> want = {
      {"still", {0, 0}}, {"left", {-step, 0}}, {"right", {step, 0}}, {"up", {0, -step}}, {"down", {0, step}}};
  for (const auto& [dir, w] : want) {
    ASSERT_TRUE(mc.by_dir.count(dir)) << dir;
    const auto& v = mc.by_dir.at(dir);
    EXPECT_GE(v.size(), 10u) << dir;
    double mx = 0, my = 0;
    for (const auto& [dx, dy] : v) mx += dx / v.size(), my += dy / v.size();
    EXPECT_LT(std::hypot(mx - w.first, my - w.second), 0.3 * step) << dir << ": mean (" << mx << ", " << my << ")";
  }
}

// At 4 id pixels per latent pixel the quantisation is small enough to check every single motion.
TEST(Synth, TextNamesEveryMotionInFineIds) {
  TempDir dir;
  SynthConfig cfg;
  cfg.out = dir.file("r");
  cfg.sem_scale = 4;
  cfg.latent_channels = 48;
  synth_root(cfg);
  const auto mc = check_motion(cfg.out);
  RecordProperty("agree", mc.agree);
  RecordProperty("checked", mc.checked);
  EXPECT_GE(mc.checked, 100);
  EXPECT_GE(mc.agree, 0.95 * mc.checked) << mc.agree << " of " << mc.checked << " motions agree with the text";
}

TEST_F(SynthRoot, TextTableHoldsEveryPromptOnceAndDistinguishesMotion) {
  const auto tt = SafetensorsFile::open(root() + "/text_table.safetensors");
  const auto prompts = json::parse(tt->metadata().at("prompts")).get<std::vector<std::string>>();
  const auto emb = tt->get("embeddings").to(torch::kFloat);
  const auto len = tt->get("lengths");
  std::map<std::string, int64_t> row;
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_TRUE(row.emplace(prompts[i], i).second) << "dup " << prompts[i];
  ASSERT_TRUE(row.count(""));
  EXPECT_EQ(emb[row.at("")].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(len[row.at("")].item<int>(), 0);
  std::set<std::string> used = {""};
  for (const auto& r : read_index(root()))
    for (const auto& c : r["cells"]) {
      ASSERT_TRUE(row.count(c.get<std::string>())) << "cell missing from the table: " << c;
      used.insert(c.get<std::string>());
    }
  EXPECT_EQ(used.size(), prompts.size()) << "the table holds exactly the prompts in use";
  EXPECT_GT(prompts.size(), 20u) << "motion varies between clips and frames";
  // Rows equal embed_prompt (bf16-rounded); distinct prompts have distinct embeddings.
  for (const auto& [p, i] : row) {
    const auto e = synth::embed_prompt(p, 16, 64);
    EXPECT_EQ(len[i].item<int>(), e.length) << p;
    EXPECT_TRUE(torch::equal(emb[i], e.rows.to(torch::kBFloat16).to(torch::kFloat))) << p;
    EXPECT_EQ(emb[i].slice(0, e.length).abs().sum().item<double>(), 0.0) << "padding of '" << p << "'";
  }
  const auto flat = emb.flatten(1);
  const auto d2 = torch::cdist(flat, flat);
  d2.fill_diagonal_(1e9);
  EXPECT_GT(d2.min().item<double>(), 1.0);
}

TEST(Synth, EmbedPromptTokensAndTruncation) {
  const auto a = synth::embed_prompt("pan:left 3:up 8:still", 4, 32);
  EXPECT_EQ(a.length, 3);
  EXPECT_EQ(a.rows.sizes(), (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(a.rows[3].abs().sum().item<double>(), 0.0);
  const auto b = synth::embed_prompt("pan:left 3:down 8:still", 4, 32);
  EXPECT_TRUE(torch::equal(a.rows[0], b.rows[0]));   // same token, same vector
  EXPECT_FALSE(torch::equal(a.rows[1], b.rows[1]));  // the motion differs
  EXPECT_GT((a.rows[1] - b.rows[1]).norm().item<double>(), 1.0);
  const auto t = synth::embed_prompt("a b c d e f", 4, 8);
  EXPECT_EQ(t.length, 4);
  const auto z = synth::embed_prompt("", 4, 8);
  EXPECT_EQ(z.length, 0);
  EXPECT_EQ(z.rows.abs().sum().item<double>(), 0.0);
}

TEST(Synth, DeterministicForASeed) {
  TempDir dir;
  SynthConfig cfg;
  cfg.train_runs = 2;
  cfg.val_runs = 1;
  cfg.n_drop = 1;
  for (const char* name : {"a", "b"}) {
    cfg.out = dir.file(name);
    synth_root(cfg);
  }
  cfg.out = dir.file("c");
  cfg.seed = 1;
  synth_root(cfg);
  const auto rows = read_index(dir.file("a"));
  EXPECT_EQ(slurp(dir.file("a/index/clips.jsonl")), slurp(dir.file("b/index/clips.jsonl")));
  for (const auto& f : {"dataset.json", "text_table.safetensors", "vae.safetensors"})
    EXPECT_EQ(slurp(dir.file("a/") + f), slurp(dir.file("b/") + f)) << f;
  for (const auto& r : rows) {
    const std::string id = r["clip_id"];
    for (const auto& sub : {"latents/", "cond/"})
      EXPECT_EQ(slurp(dir.file("a/") + sub + id + ".safetensors"), slurp(dir.file("b/") + sub + id + ".safetensors"))
          << sub << id;
    EXPECT_EQ(slurp(dir.file("a/meta/") + id + ".json"), slurp(dir.file("b/meta/") + id + ".json")) << id;
  }
  EXPECT_NE(slurp(dir.file("a/index/clips.jsonl")), slurp(dir.file("c/index/clips.jsonl")));
  const std::string id0 = rows.at(0)["clip_id"];
  EXPECT_NE(slurp(dir.file("a/latents/") + id0 + ".safetensors"), slurp(dir.file("c/latents/") + id0 + ".safetensors"));
}

TEST(Synth, CustomGeometry) {
  TempDir dir;
  SynthConfig cfg;
  cfg.out = dir.file("r");
  cfg.latent_channels = 8;
  cfg.latent_frames = 3;
  cfg.latent_h = 4;
  cfg.latent_w = 6;
  cfg.sem_scale = 1;
  cfg.text_dim = 8;
  cfg.text_len = 3;
  cfg.train_runs = 1;
  cfg.train_clips_per_run = 2;
  cfg.val_runs = 1;
  cfg.val_clips_per_run = 1;
  cfg.n_drop = 0;
  const auto rep = synth_root(cfg);
  EXPECT_EQ(rep.res, "96x64");
  EXPECT_EQ(rep.n_train, 2);
  EXPECT_EQ(rep.n_val, 1);
  const auto ds = json::parse(slurp(cfg.out + "/dataset.json"));
  EXPECT_EQ(ds["latent_hw"], json({4, 6}));
  for (const auto& r : read_index(cfg.out)) {
    const std::string id = r["clip_id"];
    EXPECT_EQ(load(cfg.out + "/latents/" + id + ".safetensors", "latents").sizes(), (std::vector<int64_t>{8, 3, 4, 6}));
    EXPECT_EQ(load(cfg.out + "/cond/" + id + ".safetensors", "ids").sizes(), (std::vector<int64_t>{3, 4, 6}));
    EXPECT_EQ(r["cells"].size(), 3u);
  }
  EXPECT_EQ(load(cfg.out + "/text_table.safetensors", "embeddings").sizes().slice(1), (std::vector<int64_t>{3, 8}));
}

TEST(Synth, FlatRootsHoldOneVectorAFrameAtUnitScale) {
  TempDir dir;
  SynthConfig cfg;
  cfg.out = dir.file("flat");
  cfg.flat = true;
  synth_root(cfg);
  double sq = 0;
  int64_t n = 0;
  for (const auto& r : read_index(cfg.out)) {
    const std::string id = r["clip_id"];
    const auto lat = load(cfg.out + "/latents/" + id + ".safetensors", "latents").to(torch::kFloat);  // [C, F, H, W]
    const auto mean = lat.mean({2, 3}, /*keepdim=*/true);
    EXPECT_EQ((lat - mean).abs().max().item<double>(), 0.0) << id << ": a latent frame is one vector";
    EXPECT_GT(mean.std().item<double>(), 0.0) << id;  // not all frames and channels alike
    sq += lat.to(torch::kDouble).square().sum().item<double>();
    n += lat.numel();
  }
  EXPECT_NEAR(std::sqrt(sq / n), 1.0, 0.05);
}

TEST(Synth, RefusesANonEmptyDirectoryUnlessOverwrite) {
  TempDir dir;
  SynthConfig cfg;
  cfg.out = dir.file("r");
  cfg.train_runs = 1;
  cfg.val_runs = 1;
  cfg.n_drop = 0;
  fs::create_directories(cfg.out + "/latents");
  std::ofstream(cfg.out + "/latents/stale.safetensors") << "x";
  std::ofstream(cfg.out + "/notes.txt") << "keep me";
  expect_error([&] { synth_root(cfg); }, {cfg.out, "--overwrite"});
  EXPECT_FALSE(fs::exists(cfg.out + "/dataset.json"));
  cfg.overwrite = true;
  synth_root(cfg);
  EXPECT_TRUE(fs::exists(cfg.out + "/dataset.json"));
  EXPECT_FALSE(fs::exists(cfg.out + "/latents/stale.safetensors")) << "overwrite replaces the synth entries";
  EXPECT_TRUE(fs::exists(cfg.out + "/notes.txt")) << "overwrite leaves other files alone";
}

TEST(Synth, ValidateNamesTheFlag) {
  SynthConfig cfg;
  cfg.out = "/tmp/unused";
  cfg.latent_frames = 0;
  expect_error([&] { cfg.validate(); }, {"--latent_frames", "0"});
  cfg = SynthConfig{};
  cfg.out = "/tmp/unused";
  cfg.n_drop = 24;
  expect_error([&] { cfg.validate(); }, {"--n_drop", "24"});
  cfg = SynthConfig{};
  expect_error([&] { cfg.validate(); }, {"OUT"});
  expect_error([] { SynthVae::open("/nonexistent/root"); }, {"/nonexistent/root/vae.safetensors"});
}

}  // namespace
}  // namespace vdt
