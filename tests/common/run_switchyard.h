// Running the switchyard binary (SY_BINARY, defined by the test target) from a test, as a user runs it.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace sy::test {

struct CommandResult {
  int code = -1;
  std::string out;  // stdout + stderr
};

// Runs `switchyard <args>` through the shell and waits for it; `out` holds stdout and, unless
// `stdout_only`, stderr.
inline CommandResult run_switchyard(const std::string& args, bool stdout_only = false) {
  const std::string cmd = std::string(SY_BINARY) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace sy::test
