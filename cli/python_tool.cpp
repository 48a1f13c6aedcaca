// The commands whose work is done by vdt's Python package (python/, run as `python -m vdt_py`): `vdt data prepare`
// and `vdt decode`. Every argument goes to the Python command unchanged (its --help lists the flags); the interpreter
// is $VDT_PYTHON, else the venv that scripts/py_env.sh sets up (created on first use, then reused), and PYTHONPATH
// gets the package source next to this binary (<prefix>/share/vdt/python/src when installed) or in the checkout it
// was built from.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

namespace vdt::cli {

namespace {

namespace fs = std::filesystem;

// The directory holding scripts/py_env.sh and python/src: <exe>/../share/vdt (installed), else the source checkout.
fs::path tool_root() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "vdt";
    if (fs::exists(installed / "python" / "src" / "vdt_py" / "__main__.py")) return installed;
  }
  const fs::path src = VDT_SOURCE_DIR;
  VDT_CHECK(fs::exists(src / "python" / "src" / "vdt_py" / "__main__.py"), "vdt's Python package is not at ",
            src.string(),
            "/python/src (this binary was built there) nor in ../share/vdt beside it\n---> HINT: run the binary from "
            "its build tree, or install it with cmake --install");
  return src;
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  VDT_CHECK(p, "cannot run ", cmd);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  VDT_CHECK(status == 0, cmd, " failed (exit status ", WEXITSTATUS(status), "); its messages are above");
  return out;
}

std::string python_of(const fs::path& root) {
  if (const char* env = std::getenv("VDT_PYTHON"); env && *env) return env;
  std::string out = run_capture("bash '" + (root / "scripts" / "py_env.sh").string() + "'");
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.substr(out.find_last_of('\n') + 1);  // the python is the last line
}

// The environment of a python child: ours with PYTHONPATH led by the package source and VDT_PY_PROG set.
std::vector<std::string> child_env(const std::string& pkg, const std::string& prog) {
  std::vector<std::string> env;
  std::string pythonpath = pkg;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("PYTHONPATH=", 0) == 0) {
      if (kv.size() > 11) pythonpath += ":" + kv.substr(11);
    } else if (kv.rfind("VDT_PY_PROG=", 0) != 0) {
      env.push_back(kv);
    }
  }
  env.push_back("PYTHONPATH=" + pythonpath);
  env.push_back("VDT_PY_PROG=" + prog);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Replaces this process with `python -m vdt_py <command> <args...>`; returns only on failure (an error).
void exec_python(const std::string& command, const std::string& prog, const std::vector<std::string>& args) {
  const fs::path root = tool_root();
  const std::string python = python_of(root);
  auto env = child_env((root / "python" / "src").string(), prog);
  std::vector<std::string> argv_s = {python, "-m", "vdt_py", command};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  auto argv = c_strings(argv_s);
  auto envp = c_strings(env);
  std::fflush(stdout);
  execve(python.c_str(), argv.data(), envp.data());
  VDT_FAIL("cannot run ", python, " (", std::strerror(errno),
           ")\n---> HINT: set VDT_PYTHON to a python with vdt's "
           "Python dependencies, or rerun scripts/py_env.sh");
}

// A subcommand that hands all its arguments (--help included) to `python -m vdt_py <command>`.
void add_forwarding(CLI::App& parent, const std::string& name, const std::string& command, const std::string& prog,
                    const std::string& help) {
  auto* sub = parent.add_subcommand(name, help + " (Python: python/; `" + prog + " --help` lists the flags)");
  sub->prefix_command();
  sub->allow_extras();
  sub->set_help_flag();
  sub->callback([sub, command, prog] { exec_python(command, prog, sub->remaining()); });
}

}  // namespace

std::string python_tool_root() {
  try {
    return tool_root().string();
  } catch (const Error&) {
    return "";
  }
}

int run_python_tool(const std::string& command, const std::vector<std::string>& args) {
  const fs::path root = tool_root();
  const std::string python = python_of(root);
  auto env = child_env((root / "python" / "src").string(), "vdt " + command);
  std::vector<std::string> argv_s = {python, "-m", "vdt_py", command};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  auto argv = c_strings(argv_s);
  auto envp = c_strings(env);
  std::fflush(stdout);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), envp.data());
  VDT_CHECK(rc == 0, "cannot run ", python, " (", std::strerror(rc), ")");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void add_data_prepare(CLI::App& data_cmd, int& exit_code) {
  (void)exit_code;
  add_forwarding(data_cmd, "prepare", "prepare", "vdt data prepare",
                 "Videos or frame folders + captions (+ id maps) -> a data root: VAE latents and the text table "
                 "(Wan or MiniMax-H3)");
}

void add_decode(CLI::App& app, int& exit_code) {
  (void)exit_code;
  add_forwarding(app, "decode", "decode", "vdt decode",
                 "Latents from `vdt sample` -> mp4 + contact-sheet PNG (Wan VAE; MiniMax-H3 with its audio track)");
}

}  // namespace vdt::cli
