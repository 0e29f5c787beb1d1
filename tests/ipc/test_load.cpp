// A small loopback load test: many streaming requests at once over both
// front ends, with zero errors and every token accounted for.
#include <catch2/catch.hpp>

#include "ipc/testing/fake_backend.hpp"
#include "ipc/load_generator.hpp"
#include "ipc/server.hpp"

using namespace llmk::ipc;

TEST_CASE("Sixty streaming requests at concurrency 16 lose and duplicate no token on either front end", "[load]") {
  FakeBackend backend({.step_interval = std::chrono::microseconds(500), .max_running = 16});
  Server server(backend, {.http = "127.0.0.1:0", .zmq = "tcp://127.0.0.1:*"});
  LoadOptions o;
  o.http_port = server.http()->port();
  o.zmq_endpoint = server.zmq()->endpoint();
  o.num_requests = 60;
  o.concurrency = 16;
  o.max_tokens = 24;
  o.prompts = {"alpha", "beta gamma", "a much longer prompt than the others", "z"};
  o.expected_text = [](const std::string& prompt) {
    return FakeBackend::expected_text(FakeBackend::tokenize(prompt, true), 24);
  };
  for (const char* protocol : {"http", "zmq"}) {
    o.protocol = protocol;
    const LoadReport r = run_load(o);
    INFO(protocol << ": " << r.summary() << (r.first_errors.empty() ? "" : " first error: " + r.first_errors[0]));
    CHECK(r.num_ok == 60);
    CHECK(r.num_errors == 0);
    CHECK(r.num_token_mismatches == 0);
    CHECK(r.num_tokens == 60u * 24u);
    CHECK(r.ttft_p50_s > 0);
  }
  CHECK(backend.stats().kv.used_slots == 0);
}
