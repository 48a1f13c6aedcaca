// TbWriter and CRC-32C: known answers, a slow bitwise CRC beside the table one, an independent minimal reader of the
// record framing and protobuf fields, and the real consumer (tensorboard's EventAccumulator, installed by
// scripts/py_tools.sh) reading our files back.
#include "core/tb_writer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <torch/torch.h>

#include "test_util.h"

namespace vdt {
namespace {

namespace fs = std::filesystem;

// The definition, one bit at a time (reflected 0x82F63B78, init/xorout 0xFFFFFFFF).
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}
uint32_t mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

TEST(Crc32c, KnownAnswers) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // Masked values as computed by tensorboard's own reader (compat/tensorflow_stub/pywrap_tensorflow.masked_crc32c).
  EXPECT_EQ(masked_crc32c(s, 9), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c(zeros.data(), zeros.size()), 0x0FD7FFFAu);
}

TEST(Crc32c, TableMatchesBitwise) {
  std::mt19937 gen(3);
  for (size_t n : {1, 7, 8, 63, 1000}) {
    std::vector<uint8_t> buf(n);
    for (auto& b : buf) b = static_cast<uint8_t>(gen());
    EXPECT_EQ(crc32c(buf.data(), n), crc32c_bitwise(buf.data(), n)) << "n=" << n;
    EXPECT_EQ(masked_crc32c(buf.data(), n), mask(crc32c_bitwise(buf.data(), n))) << "n=" << n;
  }
}

// ---- an independent minimal reader ----

struct Event {
  std::optional<double> wall_time;
  std::optional<int64_t> step;
  std::optional<std::string> file_version;
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
};

struct Cursor {
  const std::string& s;
  size_t pos = 0;
  size_t end;
  bool done() const { return pos >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      EXPECT_LT(pos, end) << "varint runs off the message";
      const auto b = static_cast<uint8_t>(s[pos++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  template <typename T>
  T fixed() {
    T v;
    EXPECT_LE(pos + sizeof(T), end);
    std::memcpy(&v, s.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string bytes() {
    const size_t n = varint();
    EXPECT_LE(pos + n, end);
    std::string out = s.substr(pos, n);
    pos += n;
    return out;
  }
};

std::pair<std::string, float> parse_value(const std::string& msg) {
  Cursor c{msg, 0, msg.size()};
  std::pair<std::string, float> v{"", NAN};
  while (!c.done()) {
    const uint64_t key = c.varint();
    if (key == ((1 << 3) | 2))
      v.first = c.bytes();
    else if (key == ((2 << 3) | 5))
      v.second = c.fixed<float>();
    else
      ADD_FAILURE() << "unexpected Summary.Value field key " << key;
  }
  return v;
}

Event parse_event(const std::string& msg) {
  Cursor c{msg, 0, msg.size()};
  Event e;
  while (!c.done()) {
    const uint64_t key = c.varint();
    if (key == ((1 << 3) | 1))
      e.wall_time = c.fixed<double>();
    else if (key == ((2 << 3) | 0))
      e.step = static_cast<int64_t>(c.varint());
    else if (key == ((3 << 3) | 2))
      e.file_version = c.bytes();
    else if (key == ((5 << 3) | 2)) {
      const std::string summary = c.bytes();
      Cursor sc{summary, 0, summary.size()};
      while (!sc.done()) {
        EXPECT_EQ(sc.varint(), uint64_t((1 << 3) | 2)) << "Summary holds only repeated value=1";
        e.values.push_back(parse_value(sc.bytes()));
      }
    } else {
      ADD_FAILURE() << "unexpected Event field key " << key;
      break;
    }
  }
  return e;
}

std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  size_t pos = 0;
  while (pos < s.size()) {
    EXPECT_LE(pos + 12, s.size()) << "truncated record header";
    if (pos + 12 > s.size()) break;
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, s.data() + pos, 8);
    std::memcpy(&len_crc, s.data() + pos + 8, 4);
    EXPECT_EQ(len_crc, mask(crc32c_bitwise(reinterpret_cast<const uint8_t*>(s.data() + pos), 8))) << "length crc";
    EXPECT_LE(pos + 12 + len + 4, s.size()) << "truncated record";
    if (pos + 12 + len + 4 > s.size()) break;
    const std::string data = s.substr(pos + 12, len);
    uint32_t data_crc;
    std::memcpy(&data_crc, s.data() + pos + 12 + len, 4);
    EXPECT_EQ(data_crc, mask(crc32c_bitwise(reinterpret_cast<const uint8_t*>(data.data()), len))) << "data crc";
    events.push_back(parse_event(data));
    pos += 12 + len + 4;
  }
  return events;
}

struct Scalar {
  std::string tag;
  double value;
  int64_t step;
};
const std::vector<Scalar> kScalars = {
    {"train/loss", 0.5, 1},    {"train/lr", 1e-5, 1},        {"train/loss", 0.25, 2},
    {"val/mse_t500", 3.75, 2}, {"train/loss", -1.5, 300000}, {"train/grad_norm", 1e30, 7},
};

TEST(TbWriter, RoundTripThroughIndependentReader) {
  test::TempDir tmp;
  const std::string dir = tmp.file("tb/nested");
  const double t0 = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string path;
  {
    TbWriter w(dir);
    path = w.path();
    for (const auto& s : kScalars) w.add_scalar(s.tag, s.value, s.step);
    w.flush();
  }
  // events.out.tfevents.<10 digits>.<host>.<pid>.<n>
  const std::string name = fs::path(path).filename().string();
  ASSERT_EQ(fs::path(path).parent_path(), fs::path(dir));
  ASSERT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  const std::string stamp = name.substr(20, 10);
  EXPECT_EQ(stamp.find_first_not_of("0123456789"), std::string::npos) << name;
  EXPECT_EQ(name[30], '.') << name;
  const std::string pid_part = std::string(".") + std::to_string(::getpid()) + ".";
  EXPECT_NE(name.find(pid_part), std::string::npos) << name;
  EXPECT_NEAR(std::stod(stamp), t0, 5.0);

  const auto events = read_events(path);
  ASSERT_EQ(events.size(), kScalars.size() + 1);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  ASSERT_TRUE(events[0].wall_time.has_value());
  EXPECT_NEAR(*events[0].wall_time, t0, 5.0);
  EXPECT_TRUE(events[0].values.empty());
  for (size_t i = 0; i < kScalars.size(); ++i) {
    const Event& e = events[i + 1];
    ASSERT_TRUE(e.wall_time && e.step) << i;
    EXPECT_GE(*e.wall_time, *events[0].wall_time);
    EXPECT_EQ(*e.step, kScalars[i].step);
    EXPECT_FALSE(e.file_version.has_value());
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_EQ(e.values[0].first, kScalars[i].tag);
    EXPECT_EQ(e.values[0].second, static_cast<float>(kScalars[i].value));
  }
}

TEST(TbWriter, TwoWritersGetDistinctFiles) {
  test::TempDir tmp;
  TbWriter a(tmp.path().string()), b(tmp.path().string());
  EXPECT_NE(a.path(), b.path());
}

TEST(TbWriter, ErrorNamesTheDirectory) {
  test::TempDir tmp;
  const std::string blocker = tmp.file("not_a_dir");
  std::ofstream(blocker) << "x";
  test::expect_error([&] { TbWriter w(blocker + "/tb"); }, {blocker, "TensorBoard"});
}

std::string run_capture(const std::string& cmd, int* code) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *code = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// The real consumer: tensorboard's EventAccumulator (which checks both CRCs of every record) reads our directory.
TEST(TbWriter, ReadByRealTensorBoard) {
  int code = 0;
  run_capture("command -v python3 >/dev/null && (command -v pip3 || command -v pip) >/dev/null", &code);
  if (code != 0) GTEST_SKIP() << "python3 or pip not on PATH; cannot install tensorboard to read the files back";
  // The checkout from the assets path (absolute); __FILE__ may be relative to the build tree (ccache's base_dir).
  const fs::path repo = fs::path(VDT_TEST_ASSETS).parent_path().parent_path();
  const std::string tools_out = run_capture("bash '" + (repo / "scripts/py_tools.sh").string() + "' 2>&1", &code);
  ASSERT_EQ(code, 0) << "scripts/py_tools.sh failed:\n" << tools_out;
  std::string pytools = tools_out;
  while (!pytools.empty() && pytools.back() == '\n') pytools.pop_back();
  pytools = pytools.substr(pytools.find_last_of('\n') + 1);  // the directory is the last line

  test::TempDir tmp;
  const std::string dir = tmp.file("tensorboard");
  {
    TbWriter w(dir);
    for (const auto& s : kScalars) w.add_scalar(s.tag, s.value, s.step);
  }  // the destructor flushes
  const std::string script = tmp.file("read.py");
  std::ofstream(script) << R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
ea.Reload()
print("V", ea.file_version)
for tag in sorted(ea.Tags()["scalars"]):
    for ev in ea.Scalars(tag):
        print("S", tag, ev.step, repr(ev.value))
)";
  const std::string out =
      run_capture("PYTHONPATH='" + pytools + "' python3 '" + script + "' '" + dir + "' 2>&1", &code);
  ASSERT_EQ(code, 0) << out;

  std::map<std::string, std::vector<std::pair<int64_t, double>>> got, want;
  for (const auto& s : kScalars) want[s.tag].push_back({s.step, static_cast<float>(s.value)});
  std::istringstream lines(out);
  std::string line;
  bool version_seen = false;
  while (std::getline(lines, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "V") {
      double v = 0;
      ls >> v;
      EXPECT_EQ(v, 2.0) << line;
      version_seen = true;
    } else if (kind == "S") {
      std::string tag;
      int64_t step;
      double value;
      ls >> tag >> step >> value;
      got[tag].push_back({step, value});
    }
  }
  EXPECT_TRUE(version_seen) << out;
  EXPECT_EQ(got, want) << "tensorboard printed:\n" << out;
}

// A run resumed at step 100 after a crash at 150 (SummaryWriter(purge_step=101)): the real reader shows steps 101..150
// once, with the values of the resumed run, and keeps 1..100.
TEST(TbWriter, PurgeMarkerDropsTheReplayedStepsForTheRealReader) {
  test::TempDir tmp;
  const std::string dir = tmp.file("tensorboard");
  {
    TbWriter crashed(dir);
    for (int64_t s = 1; s <= 150; ++s) crashed.add_scalar("train/loss", 1.0, s);
  }
  {
    TbWriter resumed(dir);
    resumed.purge_from(101);
    for (int64_t s = 101; s <= 160; ++s) resumed.add_scalar("train/loss", 2.0, s);
  }
  const auto tb = test::read_tensorboard(dir);
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  const auto& loss = tb.scalars.at("train/loss");
  ASSERT_EQ(loss.size(), 160u);
  for (size_t i = 0; i < loss.size(); ++i) {
    EXPECT_EQ(loss[i].first, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(loss[i].second, i < 100 ? 1.0 : 2.0) << "step " << loss[i].first;
  }
}

// Images and hyper-parameters through the real reader: the PNG decodes (PIL) to the pixels given, at the step given;
// the HParams plugin's own protobufs parse the experiment and the session start info, every value with its type.
TEST(TbWriter, ImagesAndHparamsReadByRealTensorBoard) {
  test::TempDir tmp;
  const std::string dir = tmp.file("tensorboard");
  const auto img = torch::randint(0, 256, {5, 7, 3}, torch::TensorOptions().dtype(torch::kByte));
  const auto img2 = torch::rand({3, 4, 6});  // float [3, H, W] in [0, 1]
  {
    TbWriter w(dir);
    w.add_hparams(nlohmann::ordered_json{{"lr", 0.0001},
                                         {"steps", 20},
                                         {"objective", "df"},
                                         {"act_offload", false},
                                         {"prompt", "a red car"},
                                         {"targets", {"q", "k"}},
                                         {"none", nullptr}},
                  {"train/loss_v", "val/loss"});
    w.add_image("preview/clip_a", encode_png(img), 3);
    w.add_image("preview/clip_a", encode_png(img2), 9);
    w.add_scalar("train/loss_v", 0.5, 3);
  }
  const auto tb = test::read_tensorboard(dir);
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  ASSERT_EQ(tb.images.count("preview/clip_a"), 1u);
  const auto& ims = tb.images.at("preview/clip_a");
  ASSERT_EQ(ims.size(), 2u);
  EXPECT_EQ(ims[0].step, 3);
  EXPECT_EQ(ims[0].width, 7);
  EXPECT_EQ(ims[0].height, 5);
  const auto* px = img.contiguous().data_ptr<uint8_t>();
  EXPECT_EQ(ims[0].rgb, std::vector<uint8_t>(px, px + img.numel()));
  EXPECT_EQ(ims[1].step, 9);
  EXPECT_EQ(ims[1].width, 6);
  EXPECT_EQ(ims[1].height, 4);
  const auto want2 = (img2 * 255).round().to(torch::kByte).permute({1, 2, 0}).contiguous();
  EXPECT_EQ(ims[1].rgb, std::vector<uint8_t>(want2.data_ptr<uint8_t>(), want2.data_ptr<uint8_t>() + want2.numel()));

  const std::map<std::string, std::string> want = {{"lr", "n:0.0001"},        {"steps", "n:20.0"},
                                                   {"objective", "s:df"},     {"act_offload", "b:0"},
                                                   {"prompt", "s:a red car"}, {"targets", "s:[\"q\",\"k\"]"},
                                                   {"none", "s:null"}};
  EXPECT_EQ(tb.hparams, want);
  EXPECT_EQ(tb.hparam_names,
            (std::vector<std::string>{"lr", "steps", "objective", "act_offload", "prompt", "targets", "none"}));
  EXPECT_EQ(tb.metric_tags, (std::vector<std::string>{"train/loss_v", "val/loss"}));
  EXPECT_EQ(tb.scalars.at("train/loss_v").size(), 1u);
}

TEST(TbWriter, HparamsMustBeAnObject) {
  test::TempDir tmp;
  TbWriter w(tmp.file("tb"));
  test::expect_error([&] { w.add_hparams(nlohmann::ordered_json::array({1, 2}), {}); }, {"hyper-parameters", "object"});
}

}  // namespace
}  // namespace vdt
