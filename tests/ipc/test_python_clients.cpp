// Python clients against the real servers: pyzmq (examples/zmq_client.py)
// and urllib with hand-parsed server-sent events (tests/ipc/http_sse_client.py).
#include <catch2/catch.hpp>

#include "ipc/testing/fake_backend.hpp"
#include "ipc/server.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using nlohmann::json;
using test::shell_quote;

namespace {
std::string expected(const std::string& prompt, int32_t n) {
  return FakeBackend::expected_text(FakeBackend::tokenize(prompt, true), n);
}
}  // namespace

TEST_CASE("The pyzmq example streams concurrent requests whose text matches the backend's", "[python]") {
  FakeBackend backend;
  Server server(backend, {.http = "", .zmq = "tcp://127.0.0.1:*"});
  const std::vector<std::string> prompts = {"one", "two prompts", "three is a crowd"};
  std::string cmd = "/usr/bin/python3 " LLMK_SOURCE_DIR "/examples/zmq_client.py --json --max-tokens 21 --endpoint " +
                    server.zmq()->endpoint();
  for (const auto& p : prompts) cmd += " " + shell_quote(p);
  const auto r = test::run_command(cmd);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json out = json::parse(r.out);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const json& req = out["py-" + std::to_string(i)];
    CHECK(req["streamed"] == expected(prompts[i], 21));
    CHECK(req["text"] == req["streamed"]);
    CHECK(req["finish_reason"] == "length");
    CHECK(req["usage"]["completion_tokens"] == 21);
  }
}

TEST_CASE("A urllib client parsing SSE by hand gets the same text streamed and not", "[python]") {
  FakeBackend backend;
  Server server(backend, {.http = "127.0.0.1:0", .zmq = ""});
  const auto r = test::run_command("/usr/bin/python3 " LLMK_SOURCE_DIR "/tests/ipc/http_sse_client.py " +
                                   std::to_string(server.http()->port()) + " 'Tell me' 13");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json out = json::parse(r.out);
  CHECK(out["completion_status"] == 200);
  CHECK(out["completion"] == expected("Tell me", 13));
  CHECK(out["stream_status"] == 200);
  CHECK(out["stream_content_type"].get<std::string>().rfind("text/event-stream", 0) == 0);
  CHECK(out["stream_done"] == true);
  CHECK(out["stream_text"] == expected("Tell me", 13));
  CHECK(out["stream_usage"]["completion_tokens"] == 13);
  CHECK(out["chat_status"] == 200);
  CHECK(out["chat_role"] == "assistant");
  CHECK(out["chat_text"] ==
        FakeBackend::expected_text(
            FakeBackend::tokenize(ChatTemplate::by_name("chatml").render(std::vector<ChatMessage>{{"user", "Tell me"}}),
                                  true),
            13));
  CHECK(out["bad_status"] == 400);
  CHECK(out["bad_error"]["param"] == "max_tokens");
}
