// `llmk serve` as a process, on the real engine and the stories260K model:
// golden greedy continuations over both front ends, KV freed when clients
// vanish, Prometheus metrics, SIGTERM drain, a busy port.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "ipc/client.hpp"
#include "ipc/load_generator.hpp"
#include "serve_process.hpp"
#include "support.hpp"
#include "support/skip.hpp"

using namespace llmk;
using llmk::test::curl;
using llmk::test::eventually;
using llmk::test::ServeProcess;
using llmk::test::free_port;
using nlohmann::json;

namespace {

std::string ltrim(std::string s) { return s.erase(0, s.find_first_not_of(' ')); }

json golden() {
  std::ifstream in(LLMK_SHARED_DIR "/golden/stories260K.json");
  return json::parse(in);
}

}  // namespace

TEST_CASE("llmk serve returns stories260K's golden greedy continuations over HTTP and ZeroMQ", "[serve]") {
  ServeProcess serve;
  REQUIRE(serve.wait_ready());
  Client client(serve.zmq_endpoint());
  const json cases = golden()["cases"];
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    INFO("prompt: '" << c["prompt"].get<std::string>() << "'\n" << serve.log());
    const auto greedy_ids = c["greedy_ids"].get<std::vector<int32_t>>();
    const std::string greedy_text = c["greedy_text"];
    Request r;
    r.id = "golden-" + std::to_string(i);
    r.prompt_token_ids = c["input_ids"].get<std::vector<int32_t>>();
    r.sampling.temperature = 0;
    r.sampling.max_tokens = static_cast<int32_t>(greedy_ids.size());
    r.sampling.ignore_eos = true;
    const auto zmq = client.generate(r, i % 2 == 0);
    CHECK(zmq.token_ids[0] == greedy_ids);
    CHECK(ltrim(zmq.texts[0]) == ltrim(greedy_text));

    const json prompt = c["prompt"] == "" ? json(c["input_ids"]) : json(c["prompt"]);
    const json body = {{"prompt", prompt}, {"max_tokens", greedy_ids.size()}, {"temperature", 0},
                       {"ignore_eos", true}, {"stream", i % 2 == 1}};
    const auto http = curl(serve.http_port(), "POST", "/v1/completions", body.dump());
    REQUIRE(http.status == 200);
    std::string text;
    if (i % 2 == 1) {
      for (const auto& data : test::sse_data(http.body)) {
        if (data != "[DONE]") text += json::parse(data)["choices"][0]["text"].get<std::string>();
      }
    } else {
      text = http.json()["choices"][0]["text"];
    }
    CHECK(ltrim(text) == ltrim(greedy_text));
  }
  // The metrics of all that pass Prometheus' own checker.
  const auto metrics = curl(serve.http_port(), "GET", "/metrics");
  const auto file = std::filesystem::temp_directory_path() / ("llmk_serve_metrics_" + std::to_string(::getpid()));
  std::ofstream(file) << metrics.body;
  const auto check = test::run_command("promtool check metrics < " + file.string() + " 2>&1");
  std::filesystem::remove(file);
  INFO(check.out);
  CHECK(check.status == 0);
  // Every sample names the replica (server.replica_name, by default HOST:PORT).
  const std::string replica = "replica=\"127.0.0.1:" + std::to_string(serve.http_port()) + "\"";
  CHECK(metrics.body.find("llmk_time_to_first_token_seconds_count{" + replica + "} 10") != std::string::npos);
}

TEST_CASE("llmk serve frees the KV of clients that vanish mid-stream", "[serve]") {
  ServeProcess serve;
  REQUIRE(serve.wait_ready());
  Client client(serve.zmq_endpoint());
  {
    test::RawPeer peer(serve.zmq_endpoint());
    peer.send_json({{"v", 1}, {"type", "submit"}, {"id", "gone"}, {"prompt", "Once upon a time"},
                    {"params", {{"max_tokens", 500}, {"ignore_eos", true}}}});
    CHECK(peer.recv_json(std::chrono::seconds(30))["type"] == "token");
  }
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 500}, {"ignore_eos", true}, {"stream", true},
                     {"temperature", 0}};
  curl(serve.http_port(), "POST", "/v1/completions", body.dump(), "--max-time 0.2");
  CHECK(eventually([&] {
    const json s = client.stats();
    return s["kv"]["used_slots"] == 0 && s["num_running"] == 0;
  }, std::chrono::seconds(20)));
}

TEST_CASE("llmk serve drains on SIGTERM and exits 0", "[serve]") {
  const double drain_timeout = GENERATE(30.0, 0.0);
  ServeProcess serve({"--set", "server.drain_timeout_s=" + std::to_string(drain_timeout)});
  REQUIRE(serve.wait_ready());
  Client client(serve.zmq_endpoint());
  Request r;
  r.id = "in-flight";
  r.prompt = "Once upon a time";
  r.sampling.max_tokens = 400;
  r.sampling.ignore_eos = true;
  auto events = client.submit(r);
  REQUIRE(events->next(std::chrono::seconds(30)));
  serve.signal(SIGTERM);
  std::optional<RequestEvent> last;
  while (auto ev = events->next(std::chrono::seconds(30))) last = ev;
  REQUIRE(last);
  CHECK(last->finish_reason == (drain_timeout > 0 ? FinishReason::length : FinishReason::cancelled));
  INFO(serve.log());
  CHECK(serve.wait_exit(std::chrono::seconds(30)) == 0);
}

TEST_CASE("A second llmk serve on a busy port fails with a message naming the address", "[serve]") {
  ServeProcess first;
  REQUIRE(first.wait_ready());
  ServeProcess second({}, first.http_port());
  const int status = second.wait_exit(std::chrono::seconds(60));
  CHECK(status != 0);
  CHECK(status != -1);
  CHECK(second.log().find("127.0.0.1:" + std::to_string(first.http_port())) != std::string::npos);
}

TEST_CASE("llmk serve streams 48 concurrent greedy requests per front end, each equal to the golden text",
          "[serve]") {
  ServeProcess serve;
  REQUIRE(serve.wait_ready());
  const json c = golden()["cases"][1];  // "Once upon a time"
  ipc::LoadOptions o;
  o.http_port = serve.http_port();
  o.zmq_endpoint = serve.zmq_endpoint();
  o.num_requests = 48;
  o.concurrency = 12;
  o.max_tokens = static_cast<int32_t>(c["greedy_ids"].size());
  o.prompts = {c["prompt"]};
  o.expected_text = [&](const std::string&) { return c["greedy_text"].get<std::string>(); };
  for (const char* protocol : {"http", "zmq"}) {
    o.protocol = protocol;
    const auto r = ipc::run_load(o);
    INFO(protocol << ": " << r.summary() << (r.first_errors.empty() ? "" : " first error: " + r.first_errors[0]));
    CHECK(r.num_ok == 48);
    CHECK(r.num_token_mismatches == 0);
    CHECK(r.num_tokens == 48u * static_cast<uint64_t>(o.max_tokens));
  }
}

TEST_CASE("example_zmq_client prints its usage, refuses bad arguments and streams a greedy completion",
          "[serve][example]") {
  const std::string client = LLMK_BINARY_DIR "/bin/example_zmq_client";
  if (!std::filesystem::exists(client))
    LLMK_SKIP("example_zmq_client is not built here (LLMK_BUILD_EXAMPLES=OFF, as in the sanitized build)");
  const test::CommandResult help = test::run_command(client + " --help 2>&1");
  CHECK(help.status == 0);
  CHECK_THAT(help.out, Catch::Contains("usage: example_zmq_client [ENDPOINT [PROMPT [MAX_TOKENS]]]"));
  const test::CommandResult bad = test::run_command(client + " tcp://127.0.0.1:5555 hello zero 2>&1");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.out, Catch::Contains("MAX_TOKENS 'zero' is not a positive number"));
  const test::CommandResult endpoint = test::run_command(client + " not-an-endpoint 2>&1");
  CHECK(endpoint.status == 1);
  CHECK_THAT(endpoint.out, Catch::Contains("not-an-endpoint"));

  ServeProcess serve;
  REQUIRE(serve.wait_ready());
  const json c = golden()["cases"][1];
  const std::string prompt = c["prompt"];
  const auto greedy_ids = c["greedy_ids"].get<std::vector<int32_t>>();
  const test::CommandResult run = test::run_command(client + " " + serve.zmq_endpoint() + " " + test::shell_quote(prompt) + " " +
                                        std::to_string(greedy_ids.size()) + " 2>/dev/null");
  INFO(run.out << "\n" << serve.log());
  CHECK(run.status == 0);
  CHECK(ltrim(run.out) == ltrim(prompt + c["greedy_text"].get<std::string>() + "\n"));
}

#endif  // LLMK_HAVE_ENGINE
