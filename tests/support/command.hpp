// Running a shell command from a test: its exit status and what it printed;
// or starting a program in the background with its output in a log file.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

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

// Starts args[0] (looked up on PATH) with args, stdout and stderr written
// to `log`; returns the child's pid (the caller waits for it).
inline pid_t spawn_logged(std::vector<std::string> args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace llmk::test
