// Running a shell command from a test: its exit status and what it printed.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace llmk::test {

struct CommandResult {
  int status = -1;  // the exit status; -1 when it could not start or was killed by a signal
  std::string out;  // stdout (append " 2>&1" to the command for stderr too)
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace llmk::test
