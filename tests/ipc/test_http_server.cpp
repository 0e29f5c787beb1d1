// The OpenAI-compatible HTTP front end over the fake backend, driven by curl.
#include <catch2/catch.hpp>

#include <future>

#include "core/error.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "ipc/http_server.hpp"
#include "ipc/zmq_server.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::curl;
using llmk::test::eventually;
using llmk::test::sse_data;
using nlohmann::json;

namespace {

struct HttpFixture {
  explicit HttpFixture(FakeBackendOptions options = {}) : backend(options) {}
  FakeBackend backend;
  Metrics metrics;
  HttpServer server{backend, metrics, {.address = "127.0.0.1:0", .max_body_bytes = 64 << 10,
                                       .keepalive_interval = std::chrono::milliseconds(100)}};
  test::HttpResult post(const std::string& path, const json& body) { return curl(server.port(), "POST", path, body.dump()); }
};

std::vector<int32_t> prompt_ids(const std::string& prompt) { return FakeBackend::tokenize(prompt, true); }

// What the fake backend's chatml template makes of one user turn.
std::string chat_prompt(const FakeBackend&, const std::string& user) {
  const std::vector<ChatMessage> messages{{"user", user}};
  return ChatTemplate::by_name("chatml").render(messages);
}

// Concatenated text per choice index and the parsed chunks of a stream.
struct Streamed {
  std::map<int, std::string> text;
  std::map<int, std::string> finish_reason;
  std::vector<json> chunks;
  bool done = false;
};
Streamed parse_stream(const std::string& body, bool chat) {
  Streamed s;
  for (const auto& data : sse_data(body)) {
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    const json chunk = json::parse(data);
    s.chunks.push_back(chunk);
    for (const auto& c : chunk.value("choices", json::array())) {
      const int i = c["index"];
      if (chat) {
        s.text[i] += c["delta"].value("content", "");
      } else {
        s.text[i] += c["text"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) s.finish_reason[i] = c["finish_reason"];
    }
  }
  return s;
}

}  // namespace

TEST_CASE("HTTP completions return the backend's greedy text and usage", "[http]") {
  HttpFixture f;
  const auto r = f.post("/v1/completions", {{"model", "fake-model"}, {"prompt", "Hello"}, {"max_tokens", 12},
                                            {"temperature", 0}});
  REQUIRE(r.status == 200);
  const json body = r.json();
  CHECK(body["object"] == "text_completion");
  CHECK(body["choices"][0]["text"] == FakeBackend::expected_text(prompt_ids("Hello"), 12));
  CHECK(body["choices"][0]["finish_reason"] == "length");
  CHECK(body["usage"]["prompt_tokens"] == 6);
  CHECK(body["usage"]["completion_tokens"] == 12);
  CHECK(body["usage"]["total_tokens"] == 18);
}

TEST_CASE("HTTP streamed completions arrive as SSE chunks that add up to the text, then usage and [DONE]", "[http]") {
  HttpFixture f;
  const auto r = f.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 20}, {"temperature", 0},
                                            {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  REQUIRE(r.status == 200);
  const Streamed s = parse_stream(r.body, false);
  CHECK(s.done);
  CHECK(s.text.at(0) == FakeBackend::expected_text(prompt_ids("Hello"), 20));
  CHECK(s.finish_reason.at(0) == "length");
  REQUIRE(!s.chunks.empty());
  CHECK(s.chunks.back()["choices"].empty());
  CHECK(s.chunks.back()["usage"]["completion_tokens"] == 20);
  CHECK(s.chunks.size() >= 20);  // one chunk per token, plus usage
}

TEST_CASE("HTTP chat completions apply the chat template, streamed or not", "[http]") {
  HttpFixture f;
  const json messages = json::array({{{"role", "user"}, {"content", "Hi there"}}});
  const auto expected =
      FakeBackend::expected_text(FakeBackend::tokenize(chat_prompt(f.backend, "Hi there"), true), 9);
  const auto whole = f.post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 9}, {"temperature", 0}});
  REQUIRE(whole.status == 200);
  CHECK(whole.json()["object"] == "chat.completion");
  CHECK(whole.json()["choices"][0]["message"]["role"] == "assistant");
  CHECK(whole.json()["choices"][0]["message"]["content"] == expected);
  const auto streamed =
      f.post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 9}, {"temperature", 0}, {"stream", true}});
  REQUIRE(streamed.status == 200);
  const Streamed s = parse_stream(streamed.body, true);
  CHECK(s.text.at(0) == expected);
  CHECK(s.chunks.front()["choices"][0]["delta"]["role"] == "assistant");
  CHECK(s.chunks.front()["object"] == "chat.completion.chunk");
  CHECK(s.done);
}

TEST_CASE("HTTP n, stop and logprobs shape the choices", "[http]") {
  HttpFixture f;
  const auto ids = prompt_ids("multi");
  const auto r = f.post("/v1/completions", {{"prompt", "multi"}, {"max_tokens", 6}, {"n", 3}, {"temperature", 0},
                                            {"logprobs", 2}});
  REQUIRE(r.status == 200);
  const json body = r.json();
  REQUIRE(body["choices"].size() == 3);
  for (int i = 0; i < 3; ++i) {
    std::string text;
    for (int32_t id : FakeBackend::expected_tokens(ids, i, 6)) text += FakeBackend::fake_token_text(id);
    CHECK(body["choices"][i]["text"] == text);
    CHECK(body["choices"][i]["logprobs"]["tokens"].size() == 6);
    CHECK(body["choices"][i]["logprobs"]["top_logprobs"][0].size() == 3);  // the chosen token and the top 2
  }
  CHECK(body["usage"]["completion_tokens"] == 18);

  const std::string full = FakeBackend::expected_text(ids, 30);
  const auto stopped = f.post("/v1/completions", {{"prompt", "multi"}, {"max_tokens", 30}, {"temperature", 0},
                                                  {"stop", json::array({full.substr(5, 2), "never"})}});
  CHECK(stopped.json()["choices"][0]["text"] == full.substr(0, full.find(full.substr(5, 2))));
  CHECK(stopped.json()["choices"][0]["finish_reason"] == "stop");

  const auto chat = f.post("/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
                                                    {"max_tokens", 4}, {"logprobs", true}, {"top_logprobs", 1}});
  REQUIRE(chat.status == 200);
  const json content = chat.json()["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 4);
  CHECK(content[0]["top_logprobs"].size() == 2);
  CHECK(content[0]["bytes"].size() == 1);
}

TEST_CASE("HTTP models, health and metrics describe the server", "[http]") {
  HttpFixture f;
  CHECK(curl(f.server.port(), "GET", "/v1/models").json()["data"][0]["id"] == "fake-model");
  CHECK(curl(f.server.port(), "GET", "/health").json()["status"] == "ok");
  f.post("/v1/completions", {{"prompt", "count"}, {"max_tokens", 5}, {"stream", true}});
  f.post("/v1/completions", {{"prompt", 3}});  // rejected
  const auto metrics = curl(f.server.port(), "GET", "/metrics");
  REQUIRE(metrics.status == 200);
  CHECK(metrics.body.find("llmk_requests_total{frontend=\"http\",finish_reason=\"length\"} 1") != std::string::npos);
  CHECK(metrics.body.find("llmk_generation_tokens_total 5") != std::string::npos);
  CHECK(metrics.body.find("llmk_time_to_first_token_seconds_count 1") != std::string::npos);
  CHECK(metrics.body.find("llmk_inter_token_latency_seconds_count 4") != std::string::npos);
  CHECK(metrics.body.find("llmk_requests_rejected_total{frontend=\"http\",code=\"invalid_argument\"} 1") !=
        std::string::npos);
  const auto file = std::filesystem::temp_directory_path() / ("llmk_metrics_" + std::to_string(::getpid()));
  std::ofstream(file) << metrics.body;
  const auto check = test::run_command("promtool check metrics < " + file.string() + " 2>&1");
  std::filesystem::remove(file);
  INFO(check.out);
  CHECK(check.status == 0);
}

TEST_CASE("An HTTP client that disconnects mid-stream gets its request cancelled and KV returns to zero", "[http]") {
  HttpFixture f({.step_interval = std::chrono::milliseconds(5)});
  const json body = {{"prompt", "long"}, {"max_tokens", 400}, {"stream", true}};
  const auto r = curl(f.server.port(), "POST", "/v1/completions", body.dump(), "--max-time 0.3");
  CHECK(r.body.find("data: ") != std::string::npos);  // it was streaming when curl hung up
  CHECK(eventually([&] { return f.server.num_live() == 0; }));
  CHECK(f.backend.stats().kv.used_slots == 0);
  CHECK(f.backend.stats().num_running == 0);
  CHECK(f.backend.stats().num_generated_tokens < 300);
}

TEST_CASE("A second HTTP server on a busy port fails naming the address", "[http]") {
  HttpFixture f;
  const std::string address = "127.0.0.1:" + std::to_string(f.server.port());
  try {
    HttpServer second(f.backend, f.metrics, {.address = address});
    FAIL("the second bind succeeded");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(address) != std::string::npos);
  }
}

TEST_CASE("HTTP chat without a chat template is refused with a clear error", "[http]") {
  HttpFixture f({.chat_template = ""});
  const auto r = f.post("/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}});
  CHECK(r.status == 400);
  CHECK(r.json()["error"]["message"].get<std::string>().find("model.chat_template") != std::string::npos);
}

TEST_CASE("A full waiting queue answers 503 overloaded over HTTP and an overloaded error over ZeroMQ", "[http]") {
  FakeBackend backend({.step_interval = std::chrono::milliseconds(5), .max_running = 1, .max_queue = 1});
  Metrics metrics;
  HttpServer http(backend, metrics, {.address = "127.0.0.1:0"});
  ZmqServer zmq(backend, metrics, {.endpoint = "tcp://127.0.0.1:*"});
  test::RawPeer peer(zmq.endpoint());
  // The second request is sent only once the first left the queue: with a
  // queue of one, both could otherwise meet there.
  for (const char* id : {"running", "waiting"}) {
    peer.send_json({{"v", 1}, {"type", "submit"}, {"id", id}, {"prompt", "x"}, {"stream", false},
                    {"params", {{"max_tokens", 400}}}});
    if (std::string(id) == "running") REQUIRE(eventually([&] { return backend.stats().num_running == 1; }));
  }
  REQUIRE(eventually([&] { return backend.stats().num_running == 1 && backend.stats().num_waiting == 1; }));
  const auto r = curl(http.port(), "POST", "/v1/completions", R"({"prompt": "one more"})");
  CHECK(r.status == 503);
  CHECK(r.json()["error"]["code"] == "overloaded");
  const auto streamed = curl(http.port(), "POST", "/v1/completions", R"({"prompt": "one more", "stream": true})");
  CHECK(streamed.status == 503);
  peer.send_json({{"v", 1}, {"type", "submit"}, {"id", "third"}, {"prompt", "x"}});
  const json reply = peer.recv_json();
  CHECK(reply["type"] == "error");
  CHECK(reply["id"] == "third");
  CHECK(reply["code"] == "overloaded");
}
