// Two `llmk serve` replicas behind `llmk broker`: the ZeroMQ clients that
// test one server (the C++ client's load run, example_zmq_client, and the
// pyzmq example from the project venv) run unchanged against the broker's
// endpoint, get the golden greedy text, and both replicas serve.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "ipc/load_generator.hpp"
#include "ipc/serve_process.hpp"
#include "ipc/support.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using llmk::test::free_port;
using llmk::test::ServeProcess;
using nlohmann::json;

namespace {

// `llmk broker` as a child process; SIGTERM at the end.
class BrokerProcess {
 public:
  BrokerProcess() : clients_("tcp://127.0.0.1:" + std::to_string(free_port())),
                    workers_("tcp://127.0.0.1:" + std::to_string(free_port())) {
    log_ = std::filesystem::temp_directory_path() / ("llmk_broker_" + std::to_string(::getpid()) + ".log");
    std::vector<std::string> args = {LLMK_BINARY_DIR "/bin/llmk", "broker", "--clients", clients_, "--workers",
                                     workers_, "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "1000"};
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
  ~BrokerProcess() {
    ::kill(pid_, SIGTERM);
    if (!test::eventually([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, std::chrono::seconds(5))) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_);
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  const std::string& clients() const { return clients_; }
  const std::string& workers() const { return workers_; }

 private:
  std::string clients_, workers_;
  std::filesystem::path log_;
  pid_t pid_ = -1;
};

json golden() {
  std::ifstream in(LLMK_SHARED_DIR "/golden/stories260K.json");
  return json::parse(in);
}

std::string ltrim(std::string s) { return s.erase(0, s.find_first_not_of(' ')); }

// Requests a replica finished over ZeroMQ (its /metrics).
int64_t zmq_requests(int http_port) {
  const auto r = test::curl(http_port, "GET", "/metrics");
  int64_t total = 0;
  // Other labels (the replica's name) may follow.
  const std::regex line(R"(llmk_requests_total\{frontend="zmq",finish_reason="[a-z_]+"[^}]*\} (\d+))");
  for (std::sregex_iterator it(r.body.begin(), r.body.end(), line), end; it != end; ++it) total += std::stoll((*it)[1]);
  return total;
}

}  // namespace

TEST_CASE("two llmk serve replicas behind llmk broker serve the ZeroMQ clients unchanged", "[serve][broker]") {
  BrokerProcess broker;
  ServeProcess a({"--zmq-broker", broker.workers()});
  ServeProcess b({"--zmq-broker", broker.workers()});
  REQUIRE(a.wait_ready());
  REQUIRE(b.wait_ready());
  INFO("broker log:\n" << broker.log() << "\nreplica a:\n" << a.log() << "\nreplica b:\n" << b.log());
  const json c = golden()["cases"][1];  // "Once upon a time"
  const std::string prompt = c["prompt"];
  const std::string greedy_text = c["greedy_text"];
  const auto max_tokens = static_cast<int32_t>(c["greedy_ids"].size());

  // The C++ client (ipc::Client) as the serving test drives one server.
  ipc::LoadOptions o;
  o.protocol = "zmq";
  o.zmq_endpoint = broker.clients();
  o.num_requests = 48;
  o.concurrency = 12;
  o.max_tokens = max_tokens;
  o.prompts = {prompt};
  o.expected_text = [&](const std::string&) { return greedy_text; };
  const auto r = ipc::run_load(o);
  INFO(r.summary() << (r.first_errors.empty() ? "" : " first error: " + r.first_errors[0]));
  CHECK(r.num_ok == 48);
  CHECK(r.num_token_mismatches == 0);
  const int64_t served_a = zmq_requests(a.http_port()), served_b = zmq_requests(b.http_port());
  CHECK(served_a + served_b == 48);
  CHECK(served_a > 0);  // the broker spread the requests
  CHECK(served_b > 0);

  // The C++ example, as a newcomer runs it.
  const std::string example = LLMK_BINARY_DIR "/bin/example_zmq_client";
  if (std::filesystem::exists(example)) {
    const auto run = test::run_command(example + " " + broker.clients() + " " + test::shell_quote(prompt) + " " +
                                       std::to_string(max_tokens) + " 2>/dev/null");
    CHECK(run.status == 0);
    CHECK(ltrim(run.out) == ltrim(prompt + greedy_text + "\n"));
  }

  // The pyzmq example from the project venv: three requests in flight at once on one socket.
  if (test::have_venv_python() &&
      std::system((test::venv_python() + " -c 'import zmq' 2>/dev/null").c_str()) == 0) {
    const auto run = test::run_command(test::venv_python() + " " LLMK_SOURCE_DIR "/examples/zmq_client.py --json " +
                                       "--max-tokens " + std::to_string(max_tokens) + " --endpoint " +
                                       broker.clients() + " " + test::shell_quote(prompt) + " " +
                                       test::shell_quote(prompt) + " " + test::shell_quote(prompt));
    INFO(run.out);
    REQUIRE(run.status == 0);
    const json out = json::parse(run.out);
    for (const char* id : {"py-0", "py-1", "py-2"}) {
      CHECK(ltrim(out[id]["text"]) == ltrim(greedy_text));
      CHECK(out[id]["streamed"] == out[id]["text"]);
      CHECK(out[id]["finish_reason"] == "length");
    }
  }
}

TEST_CASE("a replica killed behind the broker gets no more requests and the other serves them all",
          "[serve][broker]") {
  BrokerProcess broker;
  ServeProcess a({"--zmq-broker", broker.workers()});
  ServeProcess b({"--zmq-broker", broker.workers()});
  REQUIRE(a.wait_ready());
  REQUIRE(b.wait_ready());
  a.signal(SIGKILL);
  REQUIRE(a.wait_exit(std::chrono::seconds(10)) != -1);
  // The broker drops the dead connection (closed socket, or 1 s without heartbeats).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const json c = golden()["cases"][1];
  ipc::LoadOptions o;
  o.protocol = "zmq";
  o.zmq_endpoint = broker.clients();
  o.num_requests = 12;
  o.concurrency = 4;
  o.max_tokens = static_cast<int32_t>(c["greedy_ids"].size());
  o.prompts = {c["prompt"]};
  o.expected_text = [&](const std::string&) { return c["greedy_text"].get<std::string>(); };
  const auto r = ipc::run_load(o);
  INFO(r.summary() << (r.first_errors.empty() ? "" : " first error: " + r.first_errors[0]) << "\n" << broker.log());
  CHECK(r.num_ok == 12);
  CHECK(zmq_requests(b.http_port()) == 12);
}

#endif  // LLMK_HAVE_ENGINE
