// `llmk serve` as a child process for the serving tests: the stories260K
// model, HTTP and ZeroMQ on free local ports, its output in a log file.
//
// With LLMK_TEST_SERVE_RANKS=N (and LLMK_TEST_MPIRUN naming mpirun) the
// server is a tensor-parallel job of N ranks under mpirun, so the same
// checks run against it; signals go to rank 0, as a supervisor's would
// reach the server (mpirun itself exits 1 after forwarding one).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"
#include "support/command.hpp"

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
  // model: a model directory or .gguf file (default stories260K).
  explicit ServeProcess(std::vector<std::string> extra_args = {}, int http_port = 0,
                        const std::string& model = LLMK_SHARED_DIR "/models/stories260K")
      : http_port_(http_port ? http_port : free_port()), zmq_port_(free_port()) {
    log_ = std::filesystem::temp_directory_path() / ("llmk_serve_" + std::to_string(::getpid()) + "_" +
                                                     std::to_string(http_port_) + ".log");
    std::vector<std::string> args = {LLMK_BINARY_DIR "/bin/llmk", "serve", "--model", model,
                                     "--http", "127.0.0.1:" + std::to_string(http_port_),
                                     "--zmq", zmq_endpoint(), "--set", "kv_cache.capacity_tokens=4096",
                                     "--set", "executor.num_threads=1"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    if (const int ranks = parallel_ranks(); ranks > 1) {
      args.insert(args.end(), {"--set", "parallel.tensor=" + std::to_string(ranks)});
      const char* mpirun = std::getenv("LLMK_TEST_MPIRUN");
      args.insert(args.begin(), {mpirun != nullptr ? mpirun : "mpirun", "--oversubscribe", "--allow-run-as-root",
                                 "--bind-to", "none", "--mca", "btl_vader_single_copy_mechanism", "none", "-np",
                                 std::to_string(ranks)});
      // More mpirun options, space-separated (LLMK_TEST_MPIRUN_OPTIONS).
      if (const char* more = std::getenv("LLMK_TEST_MPIRUN_OPTIONS")) {
        std::istringstream words(more);
        std::vector<std::string> options{std::istream_iterator<std::string>(words), {}};
        args.insert(args.begin() + 1, options.begin(), options.end());
      }
    }
    pid_ = spawn_logged(std::move(args), log_.string());
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
  void signal(int sig) { ::kill(parallel_ranks() > 1 ? rank_pid(0) : pid_, sig); }
  // Under mpirun: the process of rank `rank` (the child whose environment
  // says OMPI_COMM_WORLD_RANK=rank); mpirun's own pid otherwise.
  pid_t rank_pid(int rank) const {
    const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0';
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string pid, comm, state;
      pid_t parent = 0;
      if (!(stat >> pid >> comm >> state >> parent) || parent != pid_) continue;
      std::ifstream environ(entry.path() / "environ");
      const std::string env((std::istreambuf_iterator<char>(environ)), {});
      if (env.find(wanted) != std::string::npos) return std::stoi(pid);
    }
    return pid_;
  }
  // The ranks the server runs as (LLMK_TEST_SERVE_RANKS, default 1).
  static int parallel_ranks() {
    const char* env = std::getenv("LLMK_TEST_SERVE_RANKS");
    return env != nullptr ? std::max(1, std::atoi(env)) : 1;
  }
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

// Starts `llmk serve` and waits until it answers /health. A server that
// exits before that (another process bound one of its ports between
// free_port() and the server's own bind) starts again on new ports, up to
// three times; nullptr if none came up, with the last log in `log`.
inline std::unique_ptr<ServeProcess> start_ready_server(const std::vector<std::string>& extra_args, std::string& log) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto server = std::make_unique<ServeProcess>(extra_args);
    if (server->wait_ready()) return server;
    log = server->log();
    if (!server->exited()) return nullptr;  // running but not answering: no retry hides that
  }
  return nullptr;
}

}  // namespace llmk::test
