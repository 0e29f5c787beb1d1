// `llmk bench` against a running `llmk serve` (stories260K) over ZeroMQ and
// over HTTP with SSE: every request completes with its exact output length,
// and the ZeroMQ run reads the server's counters.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "render_check.hpp"
#include "support/skip.hpp"

using namespace llmk::test;
namespace fs = std::filesystem;

#if defined(LLMK_BENCH_HAVE_ENGINE) && defined(LLMK_BENCH_HAVE_ZMQ)

namespace {

// `llmk serve` as a child process, stopped with SIGTERM.
class Server {
 public:
  Server(int http_port, int zmq_port) {
    const std::string llmk = std::string(LLMK_BINARY_DIR) + "/bin/llmk";
    const std::string http = "127.0.0.1:" + std::to_string(http_port);
    const std::string zmq = "tcp://127.0.0.1:" + std::to_string(zmq_port);
    pid_ = fork();
    if (pid_ == 0) {
      const int null_fd = open("/dev/null", O_WRONLY);  // keep the test's output readable
      dup2(null_fd, 1);
      dup2(null_fd, 2);
      execl(llmk.c_str(), llmk.c_str(), "serve", "--model", LLMK_SHARED_DIR "/models/stories260K", "--threads", "1",
            "--http", http.c_str(), "--zmq", zmq.c_str(), "--set", "kv_cache.capacity_tokens=8192",
            static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Server() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  // Waits until the HTTP port answers /health: up to 60 s, as the serve tests
  // wait (tests/ipc/serve_process.hpp), since a loaded machine starts slowly.
  bool wait_ready(int http_port) const {
    for (int i = 0; i < 600; ++i) {
      const std::string out =
          run_capture("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:" + std::to_string(http_port) + "/health");
      if (out == "200") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
};

nlohmann::json run_bench(const std::string& backend_flags, const fs::path& json_file) {
  const std::string cmd = std::string(LLMK_BINARY_DIR) + "/bin/llmk bench " + backend_flags +
                          " --vocab-size 512 -n 24 --input-len 8:64 --output-len 16 --request-rate 200 --seed 5"
                          " --max-concurrency 8 --no-progress --json " + json_file.string() + " 2>&1; echo \"exit=$?\"";
  const std::string out = run_capture(cmd);
  INFO(out);
  REQUIRE(out.find("exit=0") != std::string::npos);
  std::ifstream in(json_file);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("llmk bench measures llmk serve over ZeroMQ and over HTTP", "[serving]") {
  const int http_port = 20000 + static_cast<int>(getpid() % 20000);
  const int zmq_port = http_port + 1;
  Server server(http_port, zmq_port);
  REQUIRE(server.wait_ready(http_port));
  const fs::path dir = fs::temp_directory_path() / ("llmk_bench_serving_" + std::to_string(getpid()));
  fs::create_directories(dir);

  const nlohmann::json z = run_bench("--backend zmq --endpoint tcp://127.0.0.1:" + std::to_string(zmq_port), dir / "zmq.json");
  CHECK(z["num_ok"] == 24);
  CHECK(z["num_output_tokens"] == 24 * 16);
  CHECK(z["itl_s"]["count"] == 24 * 15);  // one event per token
  CHECK(z["ttft_s"]["p50"].get<double>() > 0);
  REQUIRE(z.contains("server"));  // counters from the protocol's stats
  CHECK(z["kv_samples"]["rows"].size() > 0);

  const nlohmann::json h = run_bench("--backend http --url 127.0.0.1:" + std::to_string(http_port), dir / "http.json");
  CHECK(h["num_ok"] == 24);
  CHECK(h["num_output_tokens"] == 24 * 16);
  CHECK(h["itl_s"]["count"] == 24 * 15);  // one SSE chunk per token
  CHECK_FALSE(h.contains("server"));
  fs::remove_all(dir);
}

#else

TEST_CASE("llmk bench measures llmk serve over ZeroMQ and over HTTP", "[serving]") {
  LLMK_SKIP("this build lacks llmk_actors or ipc/client.cpp");
}

#endif
