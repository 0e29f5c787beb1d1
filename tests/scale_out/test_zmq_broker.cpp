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
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "ipc/client.hpp"

#include "ipc/load_generator.hpp"
#include "ipc/serve_process.hpp"
#include "ipc/support.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using llmk::test::free_port;
using llmk::test::ServeProcess;
using nlohmann::json;
using llmk::test::RawPeer;

namespace {

// `llmk broker` as a child process; SIGTERM at the end. Heartbeats every
// 200 ms; a replica silent for 2 s is dropped (a closed connection at once).
class BrokerProcess {
 public:
  explicit BrokerProcess(std::vector<std::string> extra_args = {})
      : BrokerProcess("tcp://127.0.0.1:" + std::to_string(free_port()),
                      "tcp://127.0.0.1:" + std::to_string(free_port()), std::move(extra_args)) {}
  BrokerProcess(std::string clients, std::string workers, std::vector<std::string> extra_args = {})
      : clients_(std::move(clients)), workers_(std::move(workers)) {
    static int count = 0;
    log_ = std::filesystem::temp_directory_path() /
           ("llmk_broker_" + std::to_string(::getpid()) + "_" + std::to_string(++count) + ".log");
    std::vector<std::string> args = {LLMK_BINARY_DIR "/bin/llmk", "broker", "--clients", clients_, "--workers",
                                     workers_, "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "2000"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = test::spawn_logged(std::move(args), log_.string());
  }
  ~BrokerProcess() {
    if (!exited_) {
      ::kill(pid_, SIGTERM);
      if (!test::eventually([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, std::chrono::seconds(5))) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
    }
    std::filesystem::remove(log_);
  }
  void kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    exited_ = true;
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
  bool exited_ = false;
};

json golden() {
  std::ifstream in(LLMK_SHARED_DIR "/golden/stories260K.json");
  return json::parse(in);
}

std::string ltrim(std::string s) { return s.erase(0, s.find_first_not_of(' ')); }

// The sum of a replica's /metrics samples whose name and labels start with `prefix`.
double metric(int http_port, const std::string& prefix) {
  const auto r = test::curl(http_port, "GET", "/metrics");
  double total = 0;
  std::istringstream lines(r.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t space = line.rfind(' ');
    if (space != std::string::npos) total += std::stod(line.substr(space + 1));
  }
  return total;
}

// Requests a replica finished over ZeroMQ (its /metrics).
int64_t zmq_requests(int http_port) {
  return static_cast<int64_t>(metric(http_port, R"(llmk_requests_total{frontend="zmq")"));
}

// The broker's health answer (null when it gives none in time).
json broker_health(Client& client) {
  try {
    return client.health(std::chrono::seconds(5));
  } catch (const Error&) {
    return nullptr;
  }
}

// The names of the replicas registered with the broker.
std::set<std::string> registered(Client& client) {
  std::set<std::string> names;
  const json h = broker_health(client);
  if (h.is_object() && h.contains("replicas")) {
    for (const auto& r : h["replicas"]) names.insert(r.value("name", ""));
  }
  return names;
}

std::string replica_name(const ServeProcess& p) { return "127.0.0.1:" + std::to_string(p.http_port()); }

// Waits until exactly these replicas are registered with the broker.
bool wait_registered(Client& client, std::set<std::string> names) {
  return test::eventually([&] { return registered(client) == names; }, std::chrono::seconds(60));
}

// A broker with two replicas, a and b, and a probe client on the broker's
// endpoint.
struct TwoReplicas {
  BrokerProcess broker;
  ServeProcess a, b;
  Client probe;
  TwoReplicas()
      : a({"--zmq-broker", broker.workers()}), b({"--zmq-broker", broker.workers()}), probe(broker.clients()) {}
  // Both replicas up and registered with the broker.
  bool ready() {
    return a.wait_ready() && b.wait_ready() && wait_registered(probe, {replica_name(a), replica_name(b)});
  }
  ServeProcess& named(const std::string& name) { return name == replica_name(a) ? a : b; }
  ServeProcess& other_than(const std::string& name) { return name == replica_name(a) ? b : a; }
};

// A request that runs long enough to act on while it is live: 8 samples of
// 480 tokens each, EOS ignored.
json long_submit(const std::string& id) {
  return {{"v", 1},
          {"type", "submit"},
          {"id", id},
          {"prompt", "Once upon a time"},
          {"params", {{"max_tokens", 480}, {"n", 8}, {"ignore_eos", true}, {"temperature", 0}}}};
}

// The replica serving the broker's only request in flight ("" when none).
std::string serving_replica(Client& client) {
  const json h = broker_health(client);
  if (!h.is_object()) return "";
  for (const auto& r : h["replicas"]) {
    if (r.value("num_in_flight", 0) == 1) return r.value("name", "");
  }
  return "";
}

}  // namespace

TEST_CASE("two llmk serve replicas behind llmk broker serve the ZeroMQ clients unchanged", "[serve][broker]") {
  TwoReplicas two;
  auto& [broker, a, b, probe] = two;
  INFO("broker log:\n" << broker.log() << "\nreplica a:\n" << a.log() << "\nreplica b:\n" << b.log());
  REQUIRE(two.ready());
  const json health = broker_health(probe);
  CHECK(health["status"] == "ok");
  CHECK(health["num_replicas"] == 2);
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
  int64_t served_a = zmq_requests(a.http_port()), served_b = zmq_requests(b.http_port());
  CHECK(served_a + served_b == 48);
  CHECK(served_a > 0);  // the broker spread the requests
  CHECK(served_b > 0);

  // One request at a time, each from a client of its own that says bye at
  // the end: they alternate between the replicas.
  std::string last_served;
  for (int i = 0; i < 4; ++i) {
    {
      Client client(broker.clients());
      Request request;
      request.id = "seq-" + std::to_string(i);
      request.prompt = prompt;
      request.sampling.temperature = 0;
      request.sampling.max_tokens = max_tokens;
      const auto result = client.generate(request);
      CHECK(ltrim(result.texts.at(0)) == ltrim(greedy_text));
    }
    const int64_t now_a = zmq_requests(a.http_port()), now_b = zmq_requests(b.http_port());
    CHECK(now_a + now_b == served_a + served_b + 1);
    const std::string served = now_a > served_a ? "a" : "b";
    CHECK(served != last_served);
    last_served = served;
    served_a = now_a;
    served_b = now_b;
  }

  // The C++ example, as a newcomer runs it.
  const std::string example = LLMK_BINARY_DIR "/bin/example_zmq_client";
  if (std::filesystem::exists(example)) {
    const auto run = test::run_command(example + " " + broker.clients() + " " + test::shell_quote(prompt) + " " +
                                       std::to_string(max_tokens) + " 2>/dev/null");
    CHECK(run.status == 0);
    CHECK(ltrim(run.out) == ltrim(prompt + greedy_text + "\n"));
  }

  // The pyzmq example from the project venv: three requests in flight at
  // once on one socket; then four runs of one request each, one after
  // another, which the two replicas share.
  if (test::have_venv_python() &&
      std::system((test::venv_python() + " -c 'import zmq' 2>/dev/null").c_str()) == 0) {
    const std::string py = test::venv_python() + " " LLMK_SOURCE_DIR "/examples/zmq_client.py --json " +
                           "--max-tokens " + std::to_string(max_tokens) + " --endpoint " + broker.clients() + " ";
    const auto run = test::run_command(py + test::shell_quote(prompt) + " " + test::shell_quote(prompt) + " " +
                                       test::shell_quote(prompt));
    INFO(run.out);
    REQUIRE(run.status == 0);
    const json out = json::parse(run.out);
    for (const char* id : {"py-0", "py-1", "py-2"}) {
      CHECK(ltrim(out[id]["text"]) == ltrim(greedy_text));
      CHECK(out[id]["streamed"] == out[id]["text"]);
      CHECK(out[id]["finish_reason"] == "length");
    }
    const int64_t before_a = zmq_requests(a.http_port()), before_b = zmq_requests(b.http_port());
    for (int i = 0; i < 4; ++i) {
      const auto one = test::run_command(py + test::shell_quote(prompt));
      CHECK(one.status == 0);
    }
    CHECK(zmq_requests(a.http_port()) - before_a == 2);
    CHECK(zmq_requests(b.http_port()) - before_b == 2);
  }
}

TEST_CASE("a replica killed behind the broker gets no more requests and the other serves them all",
          "[serve][broker]") {
  TwoReplicas two;
  auto& [broker, a, b, probe] = two;
  REQUIRE(two.ready());
  a.signal(SIGKILL);
  REQUIRE(a.wait_exit(std::chrono::seconds(10)) != -1);
  // The broker drops the dead replica (its connection closed, or silent for 2 s).
  REQUIRE(wait_registered(probe, {replica_name(b)}));
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
  CHECK_THAT(broker.log(), Catch::Contains("replica '" + replica_name(a) + "' dropped"));
}

TEST_CASE("a cancel through the broker reaches the replica serving the request, and only it", "[serve][broker]") {
  TwoReplicas two;
  auto& [broker, a, b, probe] = two;
  INFO("broker log:\n" << broker.log());
  REQUIRE(two.ready());
  RawPeer peer(broker.clients());
  peer.send_json(long_submit("long-1"));
  const json first = peer.recv_json(std::chrono::seconds(30));
  REQUIRE(first.is_object());
  REQUIRE(first["type"] == "token");
  const std::string serving = serving_replica(probe);
  REQUIRE((serving == replica_name(a) || serving == replica_name(b)));
  peer.send_json({{"v", 1}, {"type", "cancel"}, {"id", "long-1"}});
  // Tokens may still be on their way; then one final per sample, the last done.
  std::set<int> cancelled;
  for (json m = peer.recv_json(std::chrono::seconds(30)); m.is_object(); m = peer.recv_json(std::chrono::seconds(30))) {
    if (m["type"] == "error") FAIL(m.dump());
    if (m["type"] != "final") continue;
    CHECK(m["finish_reason"] == "cancelled");
    cancelled.insert(m["index"].get<int>());
    if (m["done"] == true) break;
  }
  CHECK(cancelled.size() == 8);
  ServeProcess& served = two.named(serving);
  ServeProcess& other = two.other_than(serving);
  CHECK(metric(served.http_port(), R"(llmk_requests_total{frontend="zmq",finish_reason="cancelled")") == 1);
  CHECK(metric(other.http_port(), "llmk_requests_total") == 0);
  CHECK(metric(other.http_port(), "llmk_prompt_tokens_total") == 0);
  // A cancel of what is no longer live is the broker's not_found.
  peer.send_json({{"v", 1}, {"type", "cancel"}, {"id", "long-1"}});
  const json again = peer.recv_json(std::chrono::seconds(10));
  CHECK(again["type"] == "error");
  CHECK(again["code"] == "not_found");
}

TEST_CASE("a client that vanishes behind the broker has its request cancelled on its replica", "[serve][broker]") {
  TwoReplicas two;
  auto& [broker, a, b, probe] = two;
  INFO("broker log:\n" << broker.log());
  REQUIRE(two.ready());
  std::string serving;
  {
    RawPeer peer(broker.clients());
    peer.send_json(long_submit("gone-1"));
    const json first = peer.recv_json(std::chrono::seconds(30));
    REQUIRE(first.is_object());
    REQUIRE(first["type"] == "token");
    serving = serving_replica(probe);
    REQUIRE((serving == replica_name(a) || serving == replica_name(b)));
    peer.close();  // no bye: the client just goes away
  }
  ServeProcess& served = two.named(serving);
  const std::string cancelled = R"(llmk_requests_total{frontend="zmq",finish_reason="cancelled")";
  CHECK(test::eventually([&] { return metric(served.http_port(), cancelled) == 1; }, std::chrono::seconds(30)));
  CHECK(test::eventually([&] { return metric(served.http_port(), "llmk_num_requests_running") == 0; },
                         std::chrono::seconds(30)));
  CHECK(metric(served.http_port(), "llmk_kv_cache_used_slots") == 0);
  CHECK(test::eventually([&] { return serving_replica(probe).empty(); }, std::chrono::seconds(10)));
  CHECK_THAT(broker.log(), Catch::Contains("a client left (unreachable)"));
}

TEST_CASE("killing the replica serving a request gives its client a peer_lost error naming it", "[serve][broker]") {
  TwoReplicas two;
  auto& [broker, a, b, probe] = two;
  INFO("broker log:\n" << broker.log());
  REQUIRE(two.ready());
  // The client's own silence limit is far away: the error must come from the broker.
  Client client(broker.clients(), {.server_timeout = std::chrono::seconds(120)});
  Request request;
  request.id = "doomed";
  request.prompt = "Once upon a time";
  request.sampling.max_tokens = 480;
  request.sampling.n = 8;
  request.sampling.ignore_eos = true;
  request.sampling.temperature = 0;
  auto events = client.submit(request);
  const auto first = events->next(std::chrono::seconds(30));
  REQUIRE(first.has_value());
  REQUIRE(first->finish_reason != FinishReason::error);
  const std::string serving = serving_replica(probe);
  REQUIRE((serving == replica_name(a) || serving == replica_name(b)));
  ServeProcess& served = two.named(serving);
  served.signal(SIGKILL);
  std::optional<RequestEvent> last;
  for (auto ev = events->next(std::chrono::seconds(60)); ev; ev = events->next(std::chrono::seconds(60))) last = ev;
  REQUIRE(last.has_value());
  CHECK(last->finish_reason == FinishReason::error);
  CHECK(last->error_code == ErrorCode::peer_lost);
  CHECK_THAT(last->error, Catch::Contains(serving));
  // The other replica is still registered and serves.
  ServeProcess& other = two.other_than(serving);
  REQUIRE(wait_registered(probe, {replica_name(other)}));
  Request next = request;
  next.id = "after";
  next.sampling.n = 1;
  next.sampling.max_tokens = 8;
  CHECK(client.generate(next).finish_reasons.at(0) == FinishReason::length);
}

TEST_CASE("replicas register again with a broker that restarts on the same endpoints", "[serve][broker]") {
  auto broker = std::make_unique<BrokerProcess>();
  const std::string clients = broker->clients(), workers = broker->workers();
  ServeProcess a({"--zmq-broker", workers});
  ServeProcess b({"--zmq-broker", workers});
  REQUIRE(a.wait_ready());
  REQUIRE(b.wait_ready());
  {
    Client probe(clients);
    REQUIRE(wait_registered(probe, {replica_name(a), replica_name(b)}));
  }
  broker->kill();
  broker = std::make_unique<BrokerProcess>(clients, workers);
  INFO("broker log:\n" << broker->log() << "\nreplica a:\n" << a.log());
  Client probe(clients);
  REQUIRE(wait_registered(probe, {replica_name(a), replica_name(b)}));
  CHECK_THAT(a.log(), Catch::Contains("registering again"));
  Request request;
  request.id = "after-restart";
  request.prompt = "Once upon a time";
  request.sampling.temperature = 0;
  request.sampling.max_tokens = 8;
  CHECK(probe.generate(request).finish_reasons.at(0) == FinishReason::length);
}

TEST_CASE("a hung replica is dropped, and registers again when it runs on", "[serve][broker]") {
  TwoReplicas two;
  auto& [broker, a, b, probe] = two;
  INFO("broker log:\n" << broker.log() << "\nreplica a:\n" << a.log());
  REQUIRE(two.ready());
  a.signal(SIGSTOP);
  REQUIRE(wait_registered(probe, {replica_name(b)}));  // silent past the 2 s heartbeat timeout
  a.signal(SIGCONT);
  REQUIRE(wait_registered(probe, {replica_name(a), replica_name(b)}));
  CHECK_THAT(a.log(), Catch::Contains("registering again"));
  // Both serve again: two requests in flight at once go one to each.
  const int64_t before_a = zmq_requests(a.http_port()), before_b = zmq_requests(b.http_port());
  RawPeer peer(broker.clients());
  peer.send_json(long_submit("x"));
  peer.send_json(long_submit("y"));
  int num_done = 0;
  for (json m = peer.recv_json(std::chrono::seconds(30)); m.is_object(); m = peer.recv_json(std::chrono::seconds(30))) {
    if (m["type"] == "error") FAIL(m.dump());
    if (m["type"] == "final" && m["done"] == true && ++num_done == 2) break;
  }
  CHECK(num_done == 2);
  CHECK(zmq_requests(a.http_port()) - before_a == 1);
  CHECK(zmq_requests(b.http_port()) - before_b == 1);
}

TEST_CASE("a request waits at the broker for a replica, and fails as overloaded when none comes", "[serve][broker]") {
  {
    BrokerProcess broker(std::vector<std::string>{"--queue-timeout-ms", "300"});
    Client probe(broker.clients());
    const json h = broker_health(probe);
    CHECK(h["status"] == "no_replicas");
    CHECK(h["num_replicas"] == 0);
    RawPeer peer(broker.clients());
    peer.send_json(long_submit("nowhere"));
    const json reply = peer.recv_json(std::chrono::seconds(30));
    CHECK(reply["type"] == "error");
    CHECK(reply["id"] == "nowhere");
    CHECK(reply["code"] == "overloaded");
    CHECK_THAT(reply["message"].get<std::string>(), Catch::Contains("--queue-timeout-ms"));
  }
  // With a replica that comes in time, the request waits for it.
  BrokerProcess broker(std::vector<std::string>{"--queue-timeout-ms", "120000"});
  Client client(broker.clients());
  Request request;
  request.id = "patient";
  request.prompt = "Once upon a time";
  request.sampling.temperature = 0;
  request.sampling.max_tokens = 8;
  auto events = client.submit(request);
  Client probe(broker.clients());
  CHECK(test::eventually([&] { return broker_health(probe)["num_waiting"] == 1; }, std::chrono::seconds(30)));
  ServeProcess a({"--zmq-broker", broker.workers()});
  std::optional<RequestEvent> last;
  for (auto ev = events->next(std::chrono::seconds(60)); ev; ev = events->next(std::chrono::seconds(60))) last = ev;
  REQUIRE(last.has_value());
  CHECK(last->finish_reason == FinishReason::length);
  CHECK(zmq_requests(a.http_port()) == 1);
}

TEST_CASE("bad messages through the broker get the protocol's errors, and stats come from a replica",
          "[serve][broker]") {
  BrokerProcess broker;
  ServeProcess a({"--zmq-broker", broker.workers()});
  REQUIRE(a.wait_ready());
  INFO("broker log:\n" << broker.log());
  Client probe(broker.clients());
  REQUIRE(wait_registered(probe, {replica_name(a)}));
  RawPeer peer(broker.clients());
  const auto ask = [&](const std::string& payload) {
    peer.send_frames({payload});
    return peer.recv_json(std::chrono::seconds(30));
  };
  CHECK(ask("not json")["code"] == "malformed");
  CHECK(ask(R"({"v": 1, "type": "teleport"})")["code"] == "unknown_type");
  CHECK(ask(R"({"v": 7, "type": "ping"})")["code"] == "unsupported_version");
  const json empty_id = ask(R"({"v": 1, "type": "submit", "id": "", "prompt": "Once"})");
  CHECK(empty_id["code"] == "invalid_argument");
  const json bad_param =
      ask(R"({"v": 1, "type": "submit", "id": "p", "prompt": "Once", "params": {"max_tokens": -3}})");
  CHECK(bad_param["code"] == "invalid_argument");
  CHECK(bad_param["id"] == "p");
  const json stats = ask(R"({"v": 1, "type": "stats", "ref": 5})");
  CHECK(stats["type"] == "stats");
  CHECK(stats["ref"] == 5);
  CHECK(stats["kv"]["total_slots"] == 4096);
  const json pong = ask(R"({"v": 1, "type": "ping", "ref": "r"})");
  CHECK(pong["type"] == "pong");
  CHECK(pong["ref"] == "r");
  // Nothing of the above is left in flight at the broker; "p" may be used again.
  CHECK(test::eventually([&] { return serving_replica(probe).empty(); }, std::chrono::seconds(10)));
  peer.send_json(long_submit("p"));
  peer.send_json(long_submit("p"));
  json duplicate = peer.recv_json(std::chrono::seconds(30));
  while (duplicate.is_object() && duplicate["type"] != "error") duplicate = peer.recv_json(std::chrono::seconds(30));
  REQUIRE(duplicate.is_object());
  CHECK(duplicate["code"] == "invalid_argument");
  CHECK(duplicate["id"] == "p");
}

TEST_CASE("llmk broker refuses a heartbeat timeout that is not longer than the interval", "[serve][broker]") {
  const auto run = test::run_command(std::string(LLMK_BINARY_DIR "/bin/llmk broker --clients tcp://127.0.0.1:") +
                                     std::to_string(free_port()) + " --workers tcp://127.0.0.1:" +
                                     std::to_string(free_port()) + " --heartbeat-ms 500 --heartbeat-timeout-ms 400 2>&1");
  CHECK(run.status != 0);
  CHECK_THAT(run.out, Catch::Contains("--heartbeat-timeout-ms 400") && Catch::Contains("--heartbeat-ms 500"));
}

#endif  // LLMK_HAVE_ENGINE
