// The robust tier: every case of the bad-input corpus runs the real binary under a 4 GiB address-space
// limit and a 20 s timeout, so that a crash, a blow-up or a hang fails the case as surely as a wrong exit
// code or a message that does not name the problem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "robust/robust_case.h"

namespace sy::robust {

namespace fs = std::filesystem;

fs::path source_dir() {
  const char* env = std::getenv("SY_SOURCE_DIR");
  return fs::path(env ? env : SY_SOURCE_DIR);
}

fs::path fixture(const std::string& name) { return source_dir() / "tests/fixtures" / name; }

void copy_fixture(const std::string& name, const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(fixture(name))) {
    if (e.is_regular_file()) fs::copy_file(e.path(), dir / e.path().filename());
  }
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string deep_json(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(depth, ']'); }

std::vector<std::string> inspect_args() { return {"inspect", "--model", "{d}/m"}; }
std::vector<std::string> plan_args() { return {"plan", "--model", "{d}/m", "--machine", "h200", "--gpus", "8"}; }
std::vector<std::string> generate_args() {
  return {"generate", "--model", "{d}/m", "--prompt-ids", "1,2,3", "--max-tokens", "2"};
}

void add_model_cases(std::vector<Case>& out, const std::string& name, const std::function<void(const fs::path&)>& setup,
                     const std::string& expect, const std::string& generate_expect) {
  out.push_back({.name = name + "_inspect", .setup = setup, .args = inspect_args(), .expect = expect});
  out.push_back({.name = name + "_plan", .setup = setup, .args = plan_args(), .expect = expect});
  out.push_back({.name = name + "_generate",
                 .setup = setup,
                 .args = generate_args(),
                 .expect = generate_expect.empty() ? expect : generate_expect});
}

namespace {

constexpr rlim_t kMemoryLimit = rlim_t{4} << 30;
constexpr auto kTimeout = std::chrono::seconds(20);

struct Outcome {
  int code = -1;  // exit status; -1 when killed by a signal or the timeout
  int signal = 0;
  bool timed_out = false;
  std::string err;
};

// Runs the binary with `args`: stdout discarded, stderr captured, limits set in the child before exec.
Outcome run_limited(const std::vector<std::string>& args) {
  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit as{kMemoryLimit, kMemoryLimit};
    setrlimit(RLIMIT_AS, &as);
    const rlimit core{0, 0};
    setrlimit(RLIMIT_CORE, &core);
    const int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    dup2(pipe_fd[1], STDERR_FILENO);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
    setenv("OMP_NUM_THREADS", "1", 1);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(SY_BINARY));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(SY_BINARY, argv.data());
    _exit(127);
  }
  close(pipe_fd[1]);
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      o.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{.fd = pipe_fd[0], .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = read(pipe_fd[0], buf, sizeof(buf));
    if (n <= 0) break;
    if (o.err.size() < (1u << 20)) o.err.append(buf, static_cast<size_t>(n));
  }
  close(pipe_fd[0]);
  // stderr closed: the process is ending; bound the wait anyway.
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      o.timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(2000);
  }
  if (WIFEXITED(status)) o.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  return o;
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  add_config_cases(out);
  add_checkpoint_cases(out);
  add_tokenizer_cases(out);
  add_flag_cases(out);
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = all_cases();
  return c;
}

class BadInput : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInput, OneLineErrorAndExitCode) {
  const Case& c = cases()[GetParam()];
  if (!c.known_issue.empty()) GTEST_SKIP() << "known issue: " << c.known_issue;
  const fs::path dir = fs::temp_directory_path() / ("sy_robust_" + std::to_string(getpid()) + "_" + c.name);
  fs::remove_all(dir);
  fs::create_directories(dir / "m");
  if (c.setup) c.setup(dir);
  std::vector<std::string> args;
  for (std::string a : c.args) {
    for (size_t pos; (pos = a.find("{d}")) != std::string::npos;) a.replace(pos, 3, dir.string());
    args.push_back(a);
  }
  const Outcome o = run_limited(args);
  std::error_code ec;
  fs::remove_all(dir, ec);

  ASSERT_FALSE(o.timed_out) << "no exit within 20 s; stderr: " << o.err.substr(0, 2000);
  ASSERT_EQ(o.signal, 0) << "killed by signal " << o.signal << " (" << strsignal(o.signal)
                         << "); stderr: " << o.err.substr(0, 2000);
  EXPECT_EQ(o.code, c.code) << "stderr: " << o.err.substr(0, 2000);
  if (c.lines > 0) {
    const auto lines = std::count(o.err.begin(), o.err.end(), '\n');
    EXPECT_EQ(lines, c.lines) << "stderr: " << o.err.substr(0, 2000);
    EXPECT_TRUE(o.err.empty() || o.err.back() == '\n') << "stderr: " << o.err.substr(0, 2000);
  }
  EXPECT_NE(o.err.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << o.err.substr(0, 2000);
  EXPECT_EQ(o.err.find("internal error"), std::string::npos) << o.err.substr(0, 2000);
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadInput, ::testing::Range(size_t{0}, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return cases()[info.param].name; });

TEST(BadInputCorpus, NamesAreUniqueAndTheCorpusIsLarge) {
  std::set<std::string> names;
  for (const Case& c : cases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
  EXPECT_GE(cases().size(), 300u);
}

}  // namespace

}  // namespace sy::robust
