// `llmk serve` as a child process for the serving tests: the stories260K
// model, HTTP and ZeroMQ on free local ports, its output in a log file.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support.hpp"

namespace llmk::test {

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One `llmk serve` process; killed (SIGKILL) if still running at the end.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> extra_args = {}, int http_port = 0)
      : http_port_(http_port ? http_port : free_port()), zmq_port_(free_port()) {
    log_ = std::filesystem::temp_directory_path() / ("llmk_serve_" + std::to_string(::getpid()) + "_" +
                                                     std::to_string(http_port_) + ".log");
    std::vector<std::string> args = {LLMK_BINARY_DIR "/bin/llmk", "serve", "--model",
                                     LLMK_SHARED_DIR "/models/stories260K",
                                     "--http", "127.0.0.1:" + std::to_string(http_port_),
                                     "--zmq", zmq_endpoint(), "--set", "kv_cache.capacity_tokens=4096",
                                     "--set", "executor.num_threads=1"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_);
  }
  bool wait_ready() {
    return eventually([&] { return !exited() && curl(http_port_, "GET", "/health").status == 200; },
                      std::chrono::seconds(60));
  }
  bool exited() {
    if (exited_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return exited_;
  }
  // The exit status, or -1 if it did not exit in time.
  int wait_exit(std::chrono::seconds timeout) { return eventually([&] { return exited(); }, timeout) ? exit_status_ : -1; }
  void signal(int sig) { ::kill(pid_, sig); }
  std::string log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  int http_port() const { return http_port_; }
  std::string zmq_endpoint() const { return "tcp://127.0.0.1:" + std::to_string(zmq_port_); }

 private:
  int http_port_, zmq_port_;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_status_ = -1;
};

}  // namespace llmk::test
