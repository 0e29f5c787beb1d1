// Per-key limits (429 + Retry-After), a full queue (503 + Retry-After) and
// request deadlines (cancelled, KV freed, 504 deadline_exceeded) on the
// HTTP front end, over the fake backend; KeyLimiter's windows on a fake clock.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <future>

#include "ipc/access.hpp"
#include "ipc/http_server.hpp"
#include "ipc/limits.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::curl;
using llmk::test::eventually;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

struct KeysFile {
  explicit KeysFile(const std::string& text)
      : path(std::filesystem::temp_directory_path() / ("llmk_limits_" + std::to_string(::getpid()) + ".txt")) {
    std::ofstream(path) << text;
  }
  ~KeysFile() { std::filesystem::remove(path); }
  std::filesystem::path path;
};

// Status, body and the Retry-After header of one request.
struct Reply {
  int status = 0;
  json body;
  std::string retry_after;
};
Reply post(int port, const std::string& body, const std::string& args = "") {
  const auto headers = std::filesystem::temp_directory_path() / ("llmk_limits_h_" + std::to_string(::getpid()));
  const auto r = curl(port, "POST", "/v1/completions", body, args + " -D " + headers.string());
  Reply out{r.status, r.json(), ""};
  std::ifstream in(headers);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > 12 && (line.rfind("Retry-After:", 0) == 0 || line.rfind("retry-after:", 0) == 0)) {
      out.retry_after = line.substr(12);
      out.retry_after.erase(0, out.retry_after.find_first_not_of(' '));
      while (!out.retry_after.empty() && (out.retry_after.back() == '\r' || out.retry_after.back() == ' '))
        out.retry_after.pop_back();
    }
  }
  std::filesystem::remove(headers);
  return out;
}

const std::string kAlice = "-H 'Authorization: Bearer sk-alice'";

}  // namespace

TEST_CASE("KeyLimiter counts concurrency and a sliding minute of tokens per key", "[limits]") {
  const AuthOptions options = parse_auth_options(
      R"({"limits": {"default": {"max_concurrent": 2}, "alice": {"max_concurrent": 0, "tokens_per_minute": 100}}})");
  KeyLimiter limiter(options);
  const auto t0 = LimitClock::time_point{} + std::chrono::hours(1);
  CHECK_FALSE(limiter.try_acquire("bob", t0));
  CHECK_FALSE(limiter.try_acquire("bob", t0));
  const auto third = limiter.try_acquire("bob", t0);
  REQUIRE(third);
  CHECK(third->reason == "max_concurrent");
  CHECK(third->retry_after_s == 1);
  CHECK(third->message.find("bob") != std::string::npos);
  limiter.release("bob");
  CHECK_FALSE(limiter.try_acquire("bob", t0));  // a slot came free
  CHECK_FALSE(limiter.try_acquire("carol", t0));  // keys are counted apart

  // Alice: 100 tokens a minute, any concurrency. 40 at t0, 70 at t0+20 s.
  CHECK_FALSE(limiter.try_acquire("alice", t0));
  limiter.add_tokens("alice", 40, t0);
  CHECK_FALSE(limiter.try_acquire("alice", t0 + seconds(20)));  // 40 < 100
  limiter.add_tokens("alice", 70, t0 + seconds(20));
  // 110 in the window until t0+60 s drops the first 40; then 70 < 100.
  const auto refused = limiter.try_acquire("alice", t0 + seconds(30));
  REQUIRE(refused);
  CHECK(refused->reason == "tokens_per_minute");
  CHECK(refused->retry_after_s == 30);
  CHECK(limiter.try_acquire("alice", t0 + milliseconds(59500))->retry_after_s == 1);
  CHECK_FALSE(limiter.try_acquire("alice", t0 + seconds(60)));
  CHECK(limiter.num_live("alice") == 3);
}

TEST_CASE("A key at its concurrency limit gets 429 with Retry-After, counted by key in the metrics", "[limits]") {
  KeysFile keys("alice:sk-alice\nbob:sk-bob\n");
  FakeBackend backend({.step_interval = milliseconds(5)});
  Metrics metrics;
  const auto auth = parse_auth_options(
      json{{"keys_file", keys.path.string()}, {"limits", {{"alice", {{"max_concurrent", 1}}}}}}.dump());
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .auth = auth});
  const int port = server.port();
  auto first = std::async(std::launch::async, [&] {
    return post(port, json{{"prompt", "long"}, {"max_tokens", 200}}.dump(), kAlice);
  });
  REQUIRE(eventually([&] { return backend.stats().num_running == 1; }));
  const auto refused = post(port, json{{"prompt", "x"}, {"max_tokens", 3}}.dump(), kAlice);
  CHECK(refused.status == 429);
  CHECK(refused.retry_after == "1");
  CHECK(refused.body["error"]["code"] == "rate_limit_exceeded");
  CHECK(refused.body["error"]["message"].get<std::string>().find("max_concurrent = 1") != std::string::npos);
  // Another key is not held back by alice's limit.
  CHECK(post(port, json{{"prompt", "x"}, {"max_tokens", 3}}.dump(), "-H 'Authorization: Bearer sk-bob'").status ==
        200);
  CHECK(first.get().status == 200);
  // The slot is free again once alice's request is done.
  CHECK(post(port, json{{"prompt", "x"}, {"max_tokens", 3}}.dump(), kAlice).status == 200);
  const std::string text = metrics.render(backend.stats());
  CHECK(text.find("llmk_requests_rejected_total{frontend=\"http\",code=\"rate_limit_exceeded\",key=\"alice\","
                  "reason=\"max_concurrent\"} 1") != std::string::npos);
  // Samples with and without the key labels in one family are valid exposition.
  CHECK(curl(port, "POST", "/v1/completions", "{").status == 401);
  const std::string with_both = metrics.render(backend.stats());
  CHECK(with_both.find("code=\"invalid_api_key\"} 1") != std::string::npos);
  if (test::run_command("command -v promtool").status == 0) {
    const auto file = std::filesystem::temp_directory_path() / ("llmk_limits_m_" + std::to_string(::getpid()));
    std::ofstream(file) << with_both;
    const auto check = test::run_command("promtool check metrics < " + file.string() + " 2>&1");
    std::filesystem::remove(file);
    INFO(check.out);
    CHECK(check.status == 0);
  }
}

TEST_CASE("A key past its tokens per minute gets 429 with the seconds until its window allows more", "[limits]") {
  KeysFile keys("alice:sk-alice\n");
  FakeBackend backend;
  Metrics metrics;
  const auto auth = parse_auth_options(
      json{{"keys_file", keys.path.string()}, {"limits", {{"default", {{"tokens_per_minute", 20}}}}}}.dump());
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .auth = auth});
  // "hello" is 6 prompt tokens with BOS, + 16 completion tokens = 22 >= 20.
  const auto served = post(server.port(), json{{"prompt", "hello"}, {"max_tokens", 16}}.dump(), kAlice);
  REQUIRE(served.status == 200);
  CHECK(served.body["usage"]["total_tokens"] == 22);
  const auto refused = post(server.port(), json{{"prompt", "hello"}, {"max_tokens", 1}}.dump(), kAlice);
  CHECK(refused.status == 429);
  CHECK(refused.body["error"]["message"].get<std::string>().find("tokens_per_minute = 20") != std::string::npos);
  const int retry_after = std::atoi(refused.retry_after.c_str());
  CHECK(retry_after >= 59);
  CHECK(retry_after <= 60);
  CHECK(metrics.render(backend.stats()).find("reason=\"tokens_per_minute\"} 1") != std::string::npos);
}

TEST_CASE("A full queue answers 503 with Retry-After", "[limits]") {
  FakeBackend backend({.step_interval = milliseconds(5), .max_running = 1, .max_queue = 1});
  Metrics metrics;
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0"});
  const int port = server.port();
  auto running = std::async(std::launch::async, [&] { return post(port, R"({"prompt": "a", "max_tokens": 100})"); });
  REQUIRE(eventually([&] { return backend.stats().num_running == 1; }));
  auto waiting = std::async(std::launch::async, [&] { return post(port, R"({"prompt": "b", "max_tokens": 5})"); });
  REQUIRE(eventually([&] { return backend.stats().num_waiting == 1; }));
  const auto refused = post(port, R"({"prompt": "c"})");
  CHECK(refused.status == 503);
  CHECK(refused.retry_after == "1");
  CHECK(refused.body["error"]["code"] == "overloaded");
  CHECK(running.get().status == 200);
  CHECK(waiting.get().status == 200);
}

TEST_CASE("A request past its deadline is cancelled, its KV freed, and answered 504 deadline_exceeded", "[limits]") {
  FakeBackend backend({.step_interval = milliseconds(10)});
  Metrics metrics;
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .request_timeout_s = 0.3});
  const int port = server.port();

  SECTION("the body's timeout, not streamed") {
    const auto started = std::chrono::steady_clock::now();
    const auto r = post(port, json{{"prompt", "long"}, {"max_tokens", 400}, {"timeout", 0.1}}.dump());
    CHECK(r.status == 504);
    CHECK(r.body["error"]["code"] == "deadline_exceeded");
    CHECK(r.body["error"]["message"].get<std::string>().find("0.1 s") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < seconds(3));  // 400 tokens take 4 s
  }
  SECTION("the server's default, streamed: tokens, then the error, then [DONE]") {
    const auto r = curl(port, "POST", "/v1/completions",
                        json{{"prompt", "long"}, {"max_tokens", 400}, {"stream", true}}.dump());
    CHECK(r.status == 200);
    const auto data = test::sse_data(r.body);
    REQUIRE(data.size() >= 3);
    CHECK(data.back() == "[DONE]");
    const json error = json::parse(data[data.size() - 2]);
    CHECK(error["error"]["code"] == "deadline_exceeded");
    CHECK(json::parse(data.front())["choices"][0]["text"].is_string());  // it streamed before the deadline
  }
  SECTION("a bad timeout is refused naming the field") {
    const auto r = post(port, json{{"prompt", "x"}, {"timeout", -1}}.dump());
    CHECK(r.status == 400);
    CHECK(r.body["error"]["param"] == "timeout");
  }
  CHECK(eventually([&] { return server.num_live() == 0; }));
  CHECK(backend.stats().kv.used_slots == 0);
  CHECK(backend.stats().num_running == 0);
  CHECK(backend.stats().num_generated_tokens < 200);
  // A request that ends in time is untouched by its deadline, however far.
  const auto quick = post(port, json{{"prompt", "hi"}, {"max_tokens", 3}, {"timeout", 1e300}}.dump());
  CHECK(quick.status == 200);
  CHECK(quick.body["choices"][0]["finish_reason"] == "length");
}
