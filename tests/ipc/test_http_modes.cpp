// The HTTP front end's response modes besides SSE, over the fake backend: a
// non-streaming client that hangs up, WebSocket streams and polling, each
// compared with the SSE stream of the same request; and the poll store's
// bookkeeping on its own.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "ipc/http_poll.hpp"
#include "ipc/http_server.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::connect_to;
using llmk::test::curl;
using llmk::test::eventually;
using llmk::test::sse_data;
using nlohmann::json;

namespace {

struct ModesFixture {
  explicit ModesFixture(FakeBackendOptions options = {}) : backend(options) {}
  FakeBackend backend;
  Metrics metrics;
  HttpServer server{backend, metrics, {.address = "127.0.0.1:0", .keepalive_interval = std::chrono::milliseconds(100)}};
  int port() const { return server.port(); }
};

// What a stream says, token by token: per chunk, each choice's (index,
// text or delta content, finish_reason), and the usage chunk; ids and
// timestamps (which differ between two requests) left out.
json tokens_of(const std::vector<std::string>& payloads) {
  json out = json::array();
  for (const auto& p : payloads) {
    if (p == "[DONE]") {
      out.push_back("[DONE]");
      continue;
    }
    const json chunk = json::parse(p);
    if (chunk.contains("error")) {
      out.push_back(chunk);
      continue;
    }
    json entry = json::array();
    for (const auto& c : chunk.value("choices", json::array())) {
      entry.push_back({c["index"], c.contains("delta") ? c["delta"] : c["text"], c["finish_reason"]});
    }
    if (chunk.contains("usage") && !chunk["usage"].is_null()) entry.push_back(chunk["usage"]);
    if (chunk.contains("text") && chunk.contains("meta_info")) {  // SGLang /generate
      entry.push_back({chunk["text"], chunk["output_ids"], chunk["meta_info"]["finish_reason"]});
    }
    out.push_back(entry);
  }
  return out;
}

std::vector<std::string> sse_payloads(int port, const std::string& path, const json& body) {
  const auto r = curl(port, "POST", path, body.dump());
  REQUIRE(r.status == 200);
  return sse_data(r.body);
}

// The text messages of one WebSocket request: the body sent as the first
// message, everything the server sends until it closes.
std::vector<std::string> ws_messages(int port, const std::string& path, const std::string& body) {
  namespace net = boost::asio;
  namespace websocket = boost::beast::websocket;
  net::io_context io;
  websocket::stream<net::ip::tcp::socket> ws(io);
  ws.next_layer().connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  ws.handshake("127.0.0.1:" + std::to_string(port), path);
  ws.text(true);
  ws.write(net::buffer(body));
  std::vector<std::string> out;
  for (;;) {
    boost::beast::flat_buffer buffer;
    boost::beast::error_code ec;
    ws.read(buffer, ec);
    if (ec) break;  // the server's close
    out.push_back(boost::beast::buffers_to_string(buffer.data()));
  }
  return out;
}

// All payloads of a polled request: submit, then fetch with long waits
// until done.
std::vector<std::string> poll_payloads(int port, const std::string& route, const json& body) {
  const auto submitted = curl(port, "POST", "/v1/poll" + route, body.dump());
  REQUIRE(submitted.status == 202);
  const std::string id = submitted.json()["id"];
  std::vector<std::string> out;
  size_t next = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto r = curl(port, "GET", "/v1/poll/" + id + "?from=" + std::to_string(next) + "&wait=10");
    REQUIRE(r.status == 200);
    const json j = r.json();
    CHECK(j["id"] == id);
    for (const auto& e : j["events"]) out.push_back(e.dump());
    next = j["next"];
    if (j["done"]) {
      out.push_back("[DONE]");
      break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("A non-streaming HTTP client that hangs up gets its request cancelled and its KV freed", "[http][modes]") {
  ModesFixture f({.step_interval = std::chrono::milliseconds(5)});
  const std::string body = json({{"prompt", "long"}, {"max_tokens", 400}, {"ignore_eos", true}}).dump();
  const int fd = connect_to(f.port());
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  REQUIRE(::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  REQUIRE(eventually([&] { return f.backend.stats().num_running == 1 && f.backend.stats().kv.used_slots > 0; },
                     std::chrono::seconds(30)));
  ::close(fd);
  // The server sees the hang-up while the request is still generating: its
  // cancel frees the KV at the next step, long before 400 tokens.
  CHECK(eventually([&] { return f.server.num_live() == 0; }, std::chrono::seconds(30)));
  CHECK(f.backend.stats().kv.used_slots == 0);
  CHECK(f.backend.stats().num_running == 0);
  CHECK(f.backend.stats().num_generated_tokens < 400);
  // The server goes on serving.
  CHECK(curl(f.port(), "GET", "/health").status == 200);
}

TEST_CASE("A WebSocket stream carries the SSE stream's payloads token for token", "[http][modes]") {
  ModesFixture f;
  const json completion = {{"prompt", "Hello"}, {"max_tokens", 17}, {"temperature", 0}, {"stream", true},
                           {"stream_options", {{"include_usage", true}}}};
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi there"}}})},
                     {"max_tokens", 9}, {"n", 2}, {"stream", true}};
  const json generate = {{"text", "Once"}, {"sampling_params", {{"max_new_tokens", 6}}}, {"stream", true}};
  for (const auto& [path, body] : {std::pair{std::string("/v1/completions"), completion},
                                   std::pair{std::string("/v1/chat/completions"), chat},
                                   std::pair{std::string("/generate"), generate}}) {
    INFO(path);
    const auto sse = sse_payloads(f.port(), path, body);
    const auto ws = ws_messages(f.port(), path, body.dump());
    REQUIRE(sse.size() > 3);
    CHECK(ws.back() == "[DONE]");
    CHECK(tokens_of(ws) == tokens_of(sse));
  }
}

TEST_CASE("A WebSocket request is refused with the same error body as HTTP, and cancelled when the client leaves",
          "[http][modes]") {
  ModesFixture f({.step_interval = std::chrono::milliseconds(5)});
  const std::string bad = R"({"prompt": "a", "temperature": 101})";
  const auto http = curl(f.port(), "POST", "/v1/completions", bad);
  REQUIRE(http.status == 400);
  const auto ws = ws_messages(f.port(), "/v1/completions", bad);
  REQUIRE(ws.size() == 1);
  CHECK(json::parse(ws[0]) == http.json());

  // A client that goes away mid-stream: the request is cancelled.
  namespace net = boost::asio;
  namespace websocket = boost::beast::websocket;
  {
    net::io_context io;
    websocket::stream<net::ip::tcp::socket> client(io);
    client.next_layer().connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(f.port())});
    client.handshake("127.0.0.1", "/v1/completions");
    client.write(net::buffer(json({{"prompt", "long"}, {"max_tokens", 400}, {"ignore_eos", true}}).dump()));
    boost::beast::flat_buffer first;
    client.read(first);  // one token is in
    client.next_layer().close();
  }
  CHECK(eventually([&] { return f.server.num_live() == 0; }, std::chrono::seconds(30)));
  CHECK(f.backend.stats().kv.used_slots == 0);
  CHECK(f.backend.stats().num_generated_tokens < 400);
}

TEST_CASE("A polled request's payloads equal the SSE stream token for token", "[http][modes]") {
  ModesFixture f;
  const json completion = {{"prompt", "Hello"}, {"max_tokens", 15}, {"temperature", 0}, {"stream", true},
                           {"stream_options", {{"include_usage", true}}}};
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 7},
                     {"stream", true}};
  const json generate = {{"text", "Once"}, {"sampling_params", {{"max_new_tokens", 6}}}, {"stream", true}};
  for (const auto& [route, body] : {std::pair{std::string("/completions"), completion},
                                    std::pair{std::string("/chat/completions"), chat},
                                    std::pair{std::string("/generate"), generate}}) {
    INFO(route);
    const auto sse = sse_payloads(f.port(), route == "/generate" ? route : "/v1" + route, body);
    const auto polled = poll_payloads(f.port(), route, body);
    REQUIRE(sse.size() > 3);
    CHECK(tokens_of(polled) == tokens_of(sse));
  }
}

TEST_CASE("A long poll returns as soon as a token is ready, not at the end of its wait", "[http][modes]") {
  // One token every 200 ms: a fetch that waited its whole 60 s would see
  // the request done.
  ModesFixture f({.step_interval = std::chrono::milliseconds(200)});
  const auto submitted = curl(f.port(), "POST", "/v1/poll/completions",
                              json({{"prompt", "slow"}, {"max_tokens", 200}, {"ignore_eos", true}}).dump());
  REQUIRE(submitted.status == 202);
  const std::string id = submitted.json()["id"];
  size_t next = 0;
  for (int fetch = 0; fetch < 3; ++fetch) {
    const auto started = std::chrono::steady_clock::now();
    const auto r = curl(f.port(), "GET", "/v1/poll/" + id + "?from=" + std::to_string(next) + "&wait=60",
                        "", "--max-time 90");
    REQUIRE(r.status == 200);
    INFO("fetch " << fetch << ": " << r.body);
    const json j = r.json();
    CHECK(!j["events"].empty());
    CHECK(j["done"] == false);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(60));
    CHECK(j["next"].get<size_t>() == next + j["events"].size());
    next = j["next"];
  }
  // A fetch without a wait answers at once, with what is there (maybe nothing).
  const auto now = curl(f.port(), "GET", "/v1/poll/" + id + "?from=100000");
  CHECK(now.status == 200);
  CHECK(now.json()["events"].empty());
  // DELETE cancels it; then the id is unknown.
  CHECK(curl(f.port(), "DELETE", "/v1/poll/" + id).status == 200);
  CHECK(eventually([&] { return f.server.num_live() == 0; }, std::chrono::seconds(30)));
  CHECK(f.backend.stats().kv.used_slots == 0);
  const auto gone = curl(f.port(), "GET", "/v1/poll/" + id);
  CHECK(gone.status == 404);
}

TEST_CASE("Polling an unknown id is a 404 naming it; a bad wait is a 400 naming the parameter", "[http][modes]") {
  ModesFixture f;
  const auto r = curl(f.port(), "GET", "/v1/poll/cmpl-nobody");
  CHECK(r.status == 404);
  CHECK(r.json()["error"]["code"] == "not_found");
  CHECK_THAT(r.json()["error"]["message"].get<std::string>(), Catch::Contains("cmpl-nobody"));
  const auto submitted = curl(f.port(), "POST", "/v1/poll/completions", R"({"prompt": "x", "max_tokens": 2})");
  REQUIRE(submitted.status == 202);
  const std::string id = submitted.json()["id"];
  const auto bad = curl(f.port(), "GET", "/v1/poll/" + id + "?wait=soon");
  CHECK(bad.status == 400);
  CHECK(bad.json()["error"]["param"] == "wait");
  // A refusal at submit gets its own status, as SSE does.
  const auto refused = curl(f.port(), "POST", "/v1/poll/completions", R"({"prompt": "a", "temperature": 101})");
  CHECK(refused.status == 400);
  CHECK(refused.json()["error"]["param"] == "temperature");
}

TEST_CASE("The poll store keeps finished results for a bounded time and count, and hands back abandoned ones",
          "[http][modes]") {
  using namespace std::chrono_literals;
  PollStore store({.keep = 10s, .max_finished = 2});
  const auto t0 = PollStore::Clock::now();
  for (const char* id : {"a", "b", "c"}) {
    store.add(id, "key");
    store.append(id, {"{\"n\":1}"}, true);
  }
  store.add("live", "key");
  store.append("live", {"{\"n\":1}"}, false);
  CHECK(store.expire(t0).empty());
  CHECK(store.size() == 3);  // the oldest finished one went: two kept, plus the live one
  CHECK(!store.fetch("a", "key", 0, 0ms));
  const auto b = store.fetch("b", "key", 0, 0ms);
  REQUIRE(b);
  CHECK(b->done);
  CHECK(b->payloads == std::vector<std::string>{"{\"n\":1}"});
  CHECK(!store.fetch("b", "another key", 0, 0ms));  // another key sees nothing
  // Past the keep time: finished ones are dropped, the live one is handed
  // back once for cancelling.
  CHECK(store.expire(t0 + 1h) == std::vector<std::string>{"live"});
  CHECK(store.expire(t0 + 1h).empty());
  CHECK(store.size() == 1);
  store.append("live", {}, true);
  CHECK(store.fetch("live", "key", 1, 0ms)->done);
}

TEST_CASE("A long poll waits no longer than the server's poll limit whatever its wait asks", "[http][modes]") {
  // No token for 30 s: a fetch held to its asked 60 s would see one.
  FakeBackend backend({.prefill_delay = std::chrono::seconds(30)});
  Metrics metrics;
  HttpServer server{backend, metrics,
                    {.address = "127.0.0.1:0", .first_event_wait = std::chrono::milliseconds(100),
                     .poll = {.max_wait = std::chrono::milliseconds(200)}}};
  const auto submitted = curl(server.port(), "POST", "/v1/poll/completions",
                              json({{"prompt", "late"}, {"max_tokens", 4}}).dump());
  REQUIRE(submitted.status == 202);
  const std::string id = submitted.json()["id"];
  const auto r = curl(server.port(), "GET", "/v1/poll/" + id + "?wait=60", "", "--max-time 90");
  REQUIRE(r.status == 200);
  CHECK(r.json()["events"].empty());
  CHECK(r.json()["done"] == false);
  CHECK(curl(server.port(), "DELETE", "/v1/poll/" + id).status == 200);
  CHECK(eventually([&] { return server.num_live() == 0; }, std::chrono::seconds(30)));
}
