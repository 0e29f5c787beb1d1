// The ZeroMQ front end over the fake backend: streaming, concurrency,
// cancellation, vanished clients, health and stats, via llmk::Client and a
// raw DEALER peer.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <future>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "ipc/client.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "ipc/zmq_server.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::eventually;
using llmk::test::RawPeer;
using nlohmann::json;

namespace {

struct ZmqFixture {
  explicit ZmqFixture(FakeBackendOptions options = {}) : backend(options) {}
  FakeBackend backend;
  Metrics metrics;
  ZmqServer server{backend, metrics, {.endpoint = "tcp://127.0.0.1:*", .keepalive_interval = std::chrono::milliseconds(100)}};
};

Request make_request(const std::string& id, const std::string& prompt, int32_t max_tokens) {
  Request r;
  r.id = id;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  return r;
}

std::string expected(const std::string& prompt, int32_t n) {
  return FakeBackend::expected_text(FakeBackend::tokenize(prompt, true), n);
}

}  // namespace

TEST_CASE("A streamed ZeroMQ request delivers exactly the backend's tokens, then usage", "[zmq]") {
  ZmqFixture f;
  Client client(f.server.endpoint());
  const auto result = client.generate(make_request("a", "Once upon a time", 24));
  REQUIRE(result.texts.size() == 1);
  CHECK(result.texts[0] == expected("Once upon a time", 24));
  CHECK(result.token_ids[0] == FakeBackend::expected_tokens(FakeBackend::tokenize("Once upon a time", true), 0, 24));
  CHECK(result.finish_reasons[0] == FinishReason::length);
  CHECK(result.usage.prompt_tokens == 17);
  CHECK(result.usage.completion_tokens == 24);
  CHECK(result.timings.time_to_first_token_s > 0);
}

TEST_CASE("A non-streamed ZeroMQ request returns the same text in its final event", "[zmq]") {
  ZmqFixture f;
  Client client(f.server.endpoint());
  auto events = client.submit(make_request("b", "hello", 10), false);
  std::vector<RequestEvent> seen;
  while (auto ev = events->next(std::chrono::seconds(5))) seen.push_back(*ev);
  REQUIRE(seen.size() == 1);  // no token events, one final
  CHECK(seen[0].finished);
  CHECK(seen[0].request_done);
  CHECK(seen[0].text_delta == expected("hello", 10));
  CHECK(seen[0].token_ids.size() == 10);
}

TEST_CASE("Many concurrent requests on one ZeroMQ client each get their own tokens", "[zmq]") {
  ZmqFixture f;
  Client client(f.server.endpoint());
  std::vector<std::future<Client::Result>> futures;
  for (int i = 0; i < 40; ++i) {
    futures.push_back(std::async(std::launch::async, [&client, i] {
      Request r = make_request("r" + std::to_string(i), "prompt number " + std::to_string(i), 8 + i % 7);
      r.sampling.n = 1 + i % 3;
      return client.generate(r, i % 2 == 0);
    }));
  }
  for (int i = 0; i < 40; ++i) {
    const auto result = futures[static_cast<size_t>(i)].get();
    const auto prompt_ids = FakeBackend::tokenize("prompt number " + std::to_string(i), true);
    REQUIRE(result.texts.size() == static_cast<size_t>(1 + i % 3));
    for (size_t s = 0; s < result.texts.size(); ++s) {
      CHECK(result.token_ids[s] == FakeBackend::expected_tokens(prompt_ids, static_cast<int32_t>(s), 8 + i % 7));
    }
  }
  CHECK(eventually([&] { return f.server.num_live() == 0; }));
}

TEST_CASE("Stop strings end a ZeroMQ request without the matched text", "[zmq]") {
  ZmqFixture f;
  Client client(f.server.endpoint());
  const std::string full = expected("stop test", 40);
  const std::string stop = full.substr(10, 3);
  Request r = make_request("s", "stop test", 40);
  r.sampling.stop = {stop};
  const auto result = client.generate(r);
  CHECK(result.texts[0] == full.substr(0, full.find(stop)));
  CHECK(result.finish_reasons[0] == FinishReason::stop);
}

TEST_CASE("Cancelling a live ZeroMQ request ends it with finish_reason cancelled and frees its KV", "[zmq]") {
  ZmqFixture f({.step_interval = std::chrono::milliseconds(5)});
  Client client(f.server.endpoint());
  auto events = client.submit(make_request("long", "a long one", 400));
  auto first = events->next(std::chrono::seconds(5));
  REQUIRE(first);
  CHECK(f.backend.stats().kv.used_slots > 0);
  client.cancel("long");
  std::optional<RequestEvent> last;
  while (auto ev = events->next(std::chrono::seconds(5))) last = ev;
  REQUIRE(last);
  CHECK(last->finish_reason == FinishReason::cancelled);
  CHECK(eventually([&] { return f.backend.stats().kv.used_slots == 0; }));
}

TEST_CASE("A ZeroMQ client that vanishes mid-stream gets its requests cancelled and KV returns to zero", "[zmq]") {
  ZmqFixture f({.step_interval = std::chrono::milliseconds(5)});
  const bool stream = GENERATE(true, false);
  {
    RawPeer peer(f.server.endpoint());
    for (int i = 0; i < 3; ++i) {
      peer.send_json({{"v", 1}, {"type", "submit"}, {"id", "x" + std::to_string(i)}, {"prompt", "abc"},
                      {"stream", stream}, {"params", {{"max_tokens", 500}, {"temperature", 0}}}});
    }
    REQUIRE(eventually([&] { return f.backend.stats().num_running == 3; }));
    if (stream) CHECK(peer.recv_json().value("type", "") == "token");
    peer.close();  // no bye: the process might as well have died
  }
  CHECK(eventually([&] { return f.backend.stats().kv.used_slots == 0 && f.backend.stats().num_running == 0; }));
  CHECK(eventually([&] { return f.server.num_live() == 0; }));
}

TEST_CASE("A ZeroMQ bye cancels the client's requests", "[zmq]") {
  ZmqFixture f({.step_interval = std::chrono::milliseconds(5)});
  RawPeer peer(f.server.endpoint());
  peer.send_json({{"v", 1}, {"type", "submit"}, {"id", "q"}, {"prompt", "abc"}, {"params", {{"max_tokens", 500}}}});
  REQUIRE(eventually([&] { return f.backend.stats().num_running == 1; }));
  peer.send_json({{"v", 1}, {"type", "bye"}});
  CHECK(eventually([&] { return f.backend.stats().num_running == 0 && f.server.num_live() == 0; }));
}

TEST_CASE("ZeroMQ health and stats answer with the backend's numbers", "[zmq]") {
  ZmqFixture f;
  Client client(f.server.endpoint());
  CHECK(client.health()["status"] == "ok");
  client.generate(make_request("h", "count me", 5));
  const json stats = client.stats();
  CHECK(stats["num_requests_total"] == 1);
  CHECK(stats["num_generated_tokens"] == 5);
  CHECK(stats["kv"]["used_slots"] == 0);
  // Every counter the engine keeps travels, so `llmk bench --backend zmq`
  // reports what it reports in process.
  const EngineStats st = f.backend.stats();
  CHECK(st.num_prefill_tokens > 0);
  CHECK(st.mean_batch_seqs == 1.0);  // one request ran alone
  CHECK(st.peak_running == 1);
  CHECK(stats["num_prefill_tokens"] == st.num_prefill_tokens);
  CHECK(stats["num_steps"] == st.num_steps);
  CHECK(stats["mean_batch_seqs"].get<double>() == st.mean_batch_seqs);
  CHECK(stats["peak_running"] == st.peak_running);
  CHECK(stats["kv"]["num_relocations"] == st.kv.num_relocations);
}

TEST_CASE("A REQ-style peer with an empty delimiter frame gets replies with the same envelope", "[zmq]") {
  ZmqFixture f;
  RawPeer peer(f.server.endpoint());
  peer.send_frames({"", json({{"v", 1}, {"type", "health"}, {"ref", 7}}).dump()});
  const auto frames = peer.recv_frames();
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].empty());
  CHECK(json::parse(frames[1])["ref"] == 7);
}

TEST_CASE("A second ZeroMQ server on a busy endpoint fails naming the endpoint", "[zmq]") {
  ZmqFixture f;
  try {
    ZmqServer second(f.backend, f.metrics, {.endpoint = f.server.endpoint()});
    FAIL("the second bind succeeded");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(f.server.endpoint()) != std::string::npos);
  }
}

TEST_CASE("A client whose server is gone fails its requests instead of hanging", "[zmq]") {
  Client client("tcp://127.0.0.1:1", {.server_timeout = std::chrono::milliseconds(300)});
  CHECK_THROWS_AS(client.generate(make_request("z", "hello", 4), true, std::chrono::seconds(5)), Error);
  CHECK_THROWS_AS(client.health(std::chrono::milliseconds(200)), Error);
}

namespace {

// FakeBackend with embeddings: one vector per input, [len, first id, last
// id] scaled as the request's dimensions and normalize ask (no model: the
// test checks the front end carries inputs and vectors faithfully), and an
// embed that waits for release() so a test can hold one under way.
class EmbeddingFakeBackend : public FakeBackend {
 public:
  std::vector<int32_t> embedding_ids(const std::string& text) const override {
    return FakeBackend::tokenize(text, true);
  }
  std::vector<float> embed(const std::vector<int32_t>& ids, const EmbeddingParams& params) override {
    ++num_started;
    released.wait();
    std::vector<float> v = {static_cast<float>(ids.size()), static_cast<float>(ids.front()),
                            static_cast<float>(ids.back())};
    if (params.dimensions > 0) v.resize(static_cast<size_t>(params.dimensions));
    if (params.normalize) {
      double norm = 0;
      for (float x : v) norm += static_cast<double>(x) * x;
      for (float& x : v) x = static_cast<float>(x / std::sqrt(norm));
    }
    return v;
  }
  void release() { release_.set_value(); }

  std::atomic<int> num_started{0};

 private:
  std::promise<void> release_;
  std::shared_future<void> released = release_.get_future().share();
};

}  // namespace

TEST_CASE("A ZeroMQ embed is answered off the socket thread: other peers are served while it runs", "[zmq][embeddings]") {
  EmbeddingFakeBackend backend;
  Metrics metrics;
  ZmqServer server{backend, metrics,
                   {.endpoint = "tcp://127.0.0.1:*", .keepalive_interval = std::chrono::milliseconds(100)}};
  RawPeer embedder(server.endpoint()), other(server.endpoint());
  embedder.send_json({{"v", 1}, {"type", "embed"}, {"id", "e1"}, {"input", {"Once upon", json::array({5, 6, 7})}},
                      {"normalize", false}});
  REQUIRE(eventually([&] { return backend.num_started.load() == 1; }));
  // While the embed is held, another peer's ping and a generation go through.
  other.send_json({{"v", 1}, {"type", "ping"}, {"ref", "p"}});
  const json pong = other.recv_json();
  CHECK(pong["type"] == "pong");
  Client client(server.endpoint());
  CHECK(client.generate(make_request("g", "hello", 4)).texts[0] == expected("hello", 4));
  // Held past several keepalive rounds (in which peers without live
  // requests are forgotten), the reply still reaches the peer.
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  backend.release();
  const json reply = embedder.recv_json();
  INFO(reply.dump());
  REQUIRE(reply["type"] == "embedding");
  CHECK(reply["id"] == "e1");
  const auto first_ids = FakeBackend::tokenize("Once upon", true);
  REQUIRE(reply["data"].size() == 2);
  CHECK(reply["data"][0]["index"] == 0);
  CHECK(reply["data"][0]["embedding"] == json({static_cast<double>(first_ids.size()),
                                               static_cast<double>(first_ids.front()),
                                               static_cast<double>(first_ids.back())}));
  CHECK(reply["data"][1]["embedding"] == json({3.0, 5.0, 7.0}));
  CHECK(reply["usage"]["prompt_tokens"] == first_ids.size() + 3);
  const std::string rendered = metrics.render(backend.stats());
  CHECK(rendered.find("llmk_embedding_requests_total{frontend=\"zmq\"} 1") != std::string::npos);
  CHECK(rendered.find("llmk_embedding_inputs_total{frontend=\"zmq\"} 2") != std::string::npos);
}

TEST_CASE("A bad ZeroMQ embed is refused naming its field, and the next one is served", "[zmq][embeddings]") {
  EmbeddingFakeBackend backend;
  backend.release();
  Metrics metrics;
  ZmqServer server{backend, metrics, {.endpoint = "tcp://127.0.0.1:*"}};
  RawPeer peer(server.endpoint());
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"v", 1}, {"type", "embed"}, {"id", "b1"}, {"input", "x"}, {"pooling", "max"}}, "pooling"},
      {{{"v", 1}, {"type", "embed"}, {"id", "b2"}}, "input"},
      {{{"v", 1}, {"type", "embed"}, {"id", "b3"}, {"input", ""}}, "input"},
      {{{"v", 1}, {"type", "embed"}, {"id", "b4"}, {"input", "x"}, {"encoding_format", "hex"}}, "encoding_format"},
      {{{"v", 1}, {"type", "embed"}, {"id", "b5"}, {"input", "x"}, {"stream", true}}, "stream"},
  };
  for (const auto& [msg, param] : bad) {
    peer.send_json(msg);
    const json reply = peer.recv_json();
    INFO(msg.dump() << " -> " << reply.dump());
    CHECK(reply["type"] == "error");
    CHECK(reply["id"] == msg["id"]);
    CHECK(reply["param"] == param);
  }
  peer.send_json({{"v", 1}, {"type", "embed"}, {"id", "ok"}, {"input", json::array({1, 2})}, {"dimensions", 2},
                  {"encoding_format", "base64"}});
  const json reply = peer.recv_json();
  INFO(reply.dump());
  REQUIRE(reply["type"] == "embedding");
  CHECK(reply["data"][0]["embedding"].is_string());  // base64 of float32 bytes
  CHECK(reply["data"][0]["embedding"].get<std::string>().size() == 12);  // 8 bytes -> 12 base64 characters
}
