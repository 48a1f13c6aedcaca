// Shared helpers for the test suite: paths to the reference fixtures (tests/fixtures), temp directories, running the
// vdt binary.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace vdt::test {

// The reference fixtures (tests/fixtures/FIXTURES.md); VDT_FIXTURES points elsewhere.
inline std::string fixtures_dir() {
  const char* env = std::getenv("VDT_FIXTURES");
  return env ? env : VDT_FIXTURES_DIR;
}
inline std::string fixture(const std::string& name) { return fixtures_dir() + "/" + name; }

// A fresh directory under the system temp dir, removed at destruction.
// Scoped environment variable (restored at the end of the test).
class EnvVar {
 public:
  EnvVar(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value.c_str(), 1);
  }
  ~EnvVar() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("vdt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

// The fixture of a suite whose tests share files written once: Suite::write_suite_files(dir) fills a fresh TempDir
// `dir_` before the suite's first test; it is removed after the last. Each suite has its own (Suite is the fixture
// deriving from this).
template <class Suite>
class SuiteDirTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    Suite::write_suite_files(*dir_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline TempDir* dir_ = nullptr;
};

// Rows of a CSV log written by CsvLog (no quoted commas in the columns tests read), by column name; columns in
// `skip` are left out.
inline std::vector<std::map<std::string, std::string>> read_csv(const std::string& path,
                                                                const std::set<std::string>& skip = {}) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  std::vector<std::string> cols;
  std::stringstream hs(line);
  for (std::string c; std::getline(hs, c, ',');) cols.push_back(c);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    std::stringstream ls(line);
    std::map<std::string, std::string> row;
    std::string cell;
    for (size_t i = 0; i < cols.size() && std::getline(ls, cell, ','); ++i)
      if (!skip.count(cols[i])) row[cols[i]] = cell;
    rows.push_back(row);
  }
  return rows;
}

struct RunResult {
  int code = 0;
  std::string output;
};
// Runs a shell command line, capturing what it writes to stdout (add 2>&1 for stderr too) and its exit code.
inline RunResult run_command(const std::string& cmd) {
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs the built vdt binary with `args` (a shell-quoted string), capturing stdout and stderr.
inline RunResult run_vdt(const std::string& args) {
  return run_command(std::string(VDT_BINARY) + " " + args + " 2>&1");
}

// Expects `fn` to throw an exception whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << *parts.begin();
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
  }
}

// Runs the vdt binary with extra environment; returns the wait status.
inline int spawn_vdt(const std::vector<std::string>& args, const std::vector<std::string>& env,
                     pid_t* pid_out = nullptr, const std::string& log = "/dev/null") {
  std::vector<std::string> argv_s = {VDT_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = env;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, VDT_BINARY, &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  if (pid_out) {
    *pid_out = pid;
    return 0;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A TensorBoard log directory as the real reader sees it: tensorboard's EventAccumulator (installed by
// scripts/py_tools.sh; it applies the purge marker of a restarted run). Scalars: tag -> [(step, value)] in file order;
// images: tag -> [their steps, sizes and the PNG's RGB pixels as PIL decodes them]; hparams: the session start info's
// values (name -> "n:<number>" | "s:<string>" | "b:<0|1>", read with the HParams plugin's own protobufs) and the
// experiment's hyper-parameter names and metric tags. `skip` gets a reason when python3 or pip is missing (the caller
// skips the test); errors fail the test.
struct TbImage {
  int64_t step = 0, width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3] row-major, decoded from the PNG
};
struct TbScalars {
  std::map<std::string, std::vector<std::pair<int64_t, double>>> scalars;
  std::map<std::string, std::vector<TbImage>> images;
  std::map<std::string, std::string> hparams;
  std::vector<std::string> hparam_names, metric_tags;
  std::string skip;
};
inline TbScalars read_tensorboard(const std::string& dir) {
  TbScalars out;
  auto capture = [](const std::string& cmd, int* code) {
    std::string text;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    const int status = pclose(p);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return text;
  };
  int code = 0;
  capture("command -v python3 >/dev/null && (command -v pip3 || command -v pip) >/dev/null", &code);
  if (code != 0) {
    out.skip = "python3 or pip not on PATH; cannot install tensorboard to read the files back";
    return out;
  }
  // The checkout from the assets path (absolute); __FILE__ may be relative to the build tree (ccache's base_dir).
  const std::filesystem::path repo = std::filesystem::path(VDT_TEST_ASSETS).parent_path().parent_path();
  std::string tools = capture("bash '" + (repo / "scripts/py_tools.sh").string() + "' 2>&1", &code);
  EXPECT_EQ(code, 0) << "scripts/py_tools.sh failed:\n" << tools;
  while (!tools.empty() && tools.back() == '\n') tools.pop_back();
  tools = tools.substr(tools.find_last_of('\n') + 1);  // the directory is the last line
  const std::string script =
      "import sys\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "ea = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0, 'images': 0})\n"
      "ea.Reload()\n"
      "for tag in sorted(ea.Tags()['scalars']):\n"
      "    for ev in ea.Scalars(tag):\n"
      "        print('S', tag, ev.step, repr(ev.value))\n"
      "import io\n"
      "from PIL import Image\n"
      "for tag in sorted(ea.Tags()['images']):\n"
      "    for ev in ea.Images(tag):\n"
      "        im = Image.open(io.BytesIO(ev.encoded_image_string))\n"
      "        assert im.format == 'PNG' and im.size == (ev.width, ev.height), (im.format, im.size)\n"
      "        print('I', tag, ev.step, ev.width, ev.height, im.convert('RGB').tobytes().hex())\n"
      "from tensorboard.plugins.hparams import plugin_data_pb2\n"
      "try:\n"
      "    hp = ea.PluginTagToContent('hparams')\n"
      "except KeyError:\n"
      "    hp = {}\n"
      "for tag, content in sorted(hp.items()):\n"
      "    d = plugin_data_pb2.HParamsPluginData.FromString(content)\n"
      "    assert d.version == 0, d.version\n"
      "    for h in d.experiment.hparam_infos: print('HN', h.name, h.type)\n"
      "    for m in d.experiment.metric_infos: print('MT', m.name.tag)\n"
      "    for k, v in d.session_start_info.hparams.items():\n"
      "        kind = v.WhichOneof('kind')\n"
      "        x = {'number_value': lambda: 'n:' + repr(v.number_value), 'string_value': lambda: 's:' + "
      "v.string_value,\n"
      "             'bool_value': lambda: 'b:' + str(int(v.bool_value))}[kind]()\n"
      "        print('HV', k, x.replace(' ', '%20'))\n";
  const std::string text =
      capture("PYTHONPATH='" + tools + "' python3 -c \"" + script + "\" '" + dir + "' 2>&1", &code);
  // The output holds every image's pixels in hex: a failure shows only its end (the Python error).
  EXPECT_EQ(code, 0) << (text.size() > 4000 ? "..." + text.substr(text.size() - 4000) : text);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    std::string kind, tag;
    int64_t step = 0;
    double value = 0;
    if (!(ls >> kind >> tag)) continue;
    if (kind == "S" && ls >> step >> value) out.scalars[tag].push_back({step, value});
    if (kind == "I") {
      TbImage im;
      std::string hex;
      ls >> im.step >> im.width >> im.height >> hex;
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        im.rgb.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      out.images[tag].push_back(std::move(im));
    }
    if (kind == "HN") out.hparam_names.push_back(tag);
    if (kind == "MT") out.metric_tags.push_back(tag);
    if (kind == "HV") {
      std::string v;
      ls >> v;
      for (size_t p; (p = v.find("%20")) != std::string::npos;) v.replace(p, 3, " ");
      out.hparams[tag] = v;
    }
  }
  return out;
}

}  // namespace vdt::test
