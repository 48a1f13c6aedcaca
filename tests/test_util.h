// Shared helpers for the test suite: paths to ../shared fixtures, temp directories, running the vdt binary.
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

inline std::string shared_dir() {
  const char* env = std::getenv("VDT_SHARED");
  return env ? env : VDT_SHARED_DIR;
}
inline std::string fixture(const std::string& name) { return shared_dir() + "/fixtures/" + name; }

// A fresh directory under the system temp dir, removed at destruction.
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
// Runs the built vdt binary with `args` (a shell-quoted string), capturing stdout and stderr.
inline RunResult run_vdt(const std::string& args) {
  const std::string cmd = std::string(VDT_BINARY) + " " + args + " 2>&1";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
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
inline int spawn_vdt(const std::vector<std::string>& args, const std::vector<std::string>& env, pid_t* pid_out = nullptr,
              const std::string& log = "/dev/null") {
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

}  // namespace vdt::test
