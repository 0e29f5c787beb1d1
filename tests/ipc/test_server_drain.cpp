// Graceful shutdown of both front ends: drain, then cancel at the timeout.
#include <catch2/catch.hpp>

#include <future>

#include "ipc/client.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "ipc/server.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::eventually;
using nlohmann::json;

namespace {
Request make_request(const std::string& id, const std::string& prompt, int32_t max_tokens) {
  Request r;
  r.id = id;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  return r;
}
}  // namespace

TEST_CASE("Draining lets live requests finish and refuses new ones on both front ends", "[drain]") {
  FakeBackend backend({.step_interval = std::chrono::milliseconds(2)});
  Server server(backend, {.http = "127.0.0.1:0", .zmq = "tcp://127.0.0.1:*", .drain_timeout_s = 20});
  const int port = server.http()->port();
  Client client(server.zmq()->endpoint());
  auto zmq_done = std::async(std::launch::async, [&] { return client.generate(make_request("live", "drain me", 250)); });
  auto http_done = std::async(std::launch::async, [port] {
    return test::curl(port, "POST", "/v1/completions",
                      json({{"prompt", "drain http"}, {"max_tokens", 250}, {"temperature", 0}}).dump());
  });
  REQUIRE(eventually([&] { return backend.stats().num_running == 2; }));

  auto drained = std::async(std::launch::async, [&] { return server.drain_and_stop(); });
  REQUIRE(eventually([&] { return test::curl(port, "GET", "/health").status == 503; }));
  const auto refused = test::curl(port, "POST", "/v1/completions", R"({"prompt": "late"})");
  CHECK(refused.status == 503);
  CHECK(refused.json()["error"]["code"] == "shutting_down");
  CHECK_THROWS_WITH(client.generate(make_request("late", "late", 4)), Catch::Contains("shutting_down"));

  CHECK(drained.get() == 0);
  CHECK(zmq_done.get().texts[0] == FakeBackend::expected_text(FakeBackend::tokenize("drain me", true), 250));
  const auto http = http_done.get();
  REQUIRE(http.status == 200);
  CHECK(http.json()["choices"][0]["text"] ==
        FakeBackend::expected_text(FakeBackend::tokenize("drain http", true), 250));
}

TEST_CASE("A drain that reaches its timeout cancels what is left and frees its KV", "[drain]") {
  FakeBackend backend({.step_interval = std::chrono::milliseconds(2), .max_context = 100000});
  Server server(backend, {.http = "", .zmq = "tcp://127.0.0.1:*", .drain_timeout_s = 0.2});
  Client client(server.zmq()->endpoint());
  auto events = client.submit(make_request("endless", "x", 50000));
  REQUIRE(events->next(std::chrono::seconds(5)));
  CHECK(server.drain_and_stop() == 1);
  std::optional<RequestEvent> last;
  while (auto ev = events->next(std::chrono::seconds(5))) last = ev;
  REQUIRE(last);
  CHECK(last->finish_reason == FinishReason::cancelled);
  CHECK(backend.stats().kv.used_slots == 0);
}
