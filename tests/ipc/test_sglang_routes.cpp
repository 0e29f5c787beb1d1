// What the SGLang and vLLM routers call on a worker (docs/replicas.md):
// SGLang's native /generate, /health_generate, the server and model
// descriptions and /flush_cache, over the fake backend; the replica label on the metrics.
#include <catch2/catch.hpp>

#include <future>
#include <sstream>

#include "ipc/testing/fake_backend.hpp"
#include "ipc/server.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::curl;
using llmk::test::sse_data;
using nlohmann::json;

namespace {

struct SglangFixture {
  explicit SglangFixture(FakeBackendOptions options = {}) : backend(options) {}
  FakeBackend backend;
  Server server{backend, {.http = "127.0.0.1:0", .zmq = "", .replica_name = "replica-7"}};
  int port() { return server.http()->port(); }
  test::HttpResult post(const std::string& path, const json& body) { return curl(port(), "POST", path, body.dump()); }
};

std::vector<int32_t> prompt_ids(const std::string& prompt) { return FakeBackend::tokenize(prompt, true); }

}  // namespace

TEST_CASE("POST /generate answers SGLang's shape with the backend's greedy text and ids", "[sglang]") {
  SglangFixture f;
  // The body sglang-router 0.3.2 forwards, router-added fields included.
  const json body = {{"text", "Once upon"},
                     {"model", nullptr},
                     {"sampling_params", {{"temperature", 0.0}, {"max_new_tokens", 7}}},
                     {"return_text_in_logprobs", false},
                     {"stream", false},
                     {"log_metrics", true},
                     {"return_hidden_states", false},
                     {"background", false},
                     {"no_logs", false},
                     {"return_bytes", false},
                     {"return_entropy", false}};
  const auto r = f.post("/generate", body);
  REQUIRE(r.status == 200);
  const json out = r.json();
  CHECK(out["text"] == FakeBackend::expected_text(prompt_ids("Once upon"), 7));
  CHECK(out["output_ids"] == json(FakeBackend::expected_tokens(prompt_ids("Once upon"), 0, 7)));
  CHECK(out["meta_info"]["finish_reason"] == json({{"type", "length"}, {"length", 7}}));
  CHECK(out["meta_info"]["prompt_tokens"] == prompt_ids("Once upon").size());
  CHECK(out["meta_info"]["completion_tokens"] == 7);
  CHECK(out["meta_info"]["id"].get<std::string>().rfind("gen-", 0) == 0);

  // input_ids instead of text; SGLang's default max_new_tokens is 128.
  const std::vector<int32_t> ids = {1, 70, 80, 90};
  const auto by_ids = f.post("/generate", {{"input_ids", ids}, {"sampling_params", {{"temperature", 0}}}});
  REQUIRE(by_ids.status == 200);
  CHECK(by_ids.json()["output_ids"] == json(FakeBackend::expected_tokens(ids, 0, 128)));

  // A client's rid comes back as meta_info.id; two live requests may share one.
  auto first = std::async(std::launch::async, [&] {
    return f.post("/generate", {{"text", "a"}, {"rid", "mine"}, {"sampling_params", {{"max_new_tokens", 50}}}});
  });
  const auto second = f.post("/generate", {{"text", "b"}, {"rid", "mine"}, {"sampling_params", {{"max_new_tokens", 3}}}});
  CHECK(second.status == 200);
  CHECK(second.json()["meta_info"]["id"] == "mine");
  CHECK(first.get().json()["meta_info"]["id"] == "mine");
}

TEST_CASE("POST /generate streams SGLang's cumulative chunks, then [DONE]", "[sglang]") {
  SglangFixture f;
  const auto r = f.post("/generate", {{"text", "stream me"}, {"stream", true},
                                      {"sampling_params", {{"max_new_tokens", 9}, {"temperature", 0}}}});
  REQUIRE(r.status == 200);
  const auto data = sse_data(r.body);
  REQUIRE(data.size() >= 2);
  CHECK(data.back() == "[DONE]");
  const std::string expected = FakeBackend::expected_text(prompt_ids("stream me"), 9);
  std::string previous;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json chunk = json::parse(data[i]);
    const std::string text = chunk["text"];
    CHECK(expected.rfind(text, 0) == 0);  // every chunk holds the text so far
    CHECK(text.size() >= previous.size());
    previous = text;
    CHECK(chunk["meta_info"]["finish_reason"].is_null() == (i + 2 < data.size()));
  }
  CHECK(previous == expected);
}

TEST_CASE("POST /generate with n > 1 answers a list, one object per sample", "[sglang]") {
  SglangFixture f;
  const auto r = f.post("/generate", {{"text", "two"}, {"sampling_params", {{"max_new_tokens", 4}, {"n", 2}, {"temperature", 0}}}});
  REQUIRE(r.status == 200);
  const json out = r.json();
  REQUIRE(out.is_array());
  REQUIRE(out.size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(out[i]["output_ids"] == json(FakeBackend::expected_tokens(prompt_ids("two"), i, 4)));
  }
}

TEST_CASE("POST /generate refuses what it cannot serve with a 400 naming the field", "[sglang]") {
  SglangFixture f;
  const auto check = [&](const std::string& body, const std::string& param, const std::string& words) {
    const auto r = curl(f.port(), "POST", "/generate", body);
    INFO(body << " -> " << r.body);
    CHECK(r.status == 400);
    CHECK(r.json()["error"]["param"] == param);
    CHECK_THAT(r.json()["error"]["message"].get<std::string>(), Catch::Contains(words));
  };
  check(R"({"sampling_params": {}})", "text", "exactly one of 'text' and 'input_ids'");
  check(R"({"text": "a", "input_ids": [1]})", "text", "exactly one");
  check(R"({"text": ["a", "b"]})", "text", "batched");
  check(R"({"input_ids": [[1], [2]]})", "input_ids", "batched");
  check(R"({"input_ids": [1, 9999]})", "input_ids", "outside the vocabulary");
  check(R"({"text": "a", "sampling_params": {"max_new_tokens": -3}})", "sampling_params.max_new_tokens", "");
  check(R"({"text": "a", "sampling_params": {"temperature": "hot"}})", "sampling_params.temperature", "");
  check(R"({"text": "a", "sampling_params": {"regex": "a+"}})", "sampling_params.regex",
        "unknown sampling parameter 'regex'");
  check(R"({"text": "a", "sampling_params": {"no_stop_trim": true}})", "sampling_params.no_stop_trim",
        "not supported");
  check(R"({"text": "a", "return_logprob": true})", "return_logprob", "not supported");
  check(R"({"text": "a", "lora_path": "x"})", "lora_path", "unknown /generate field 'lora_path'");
  check(R"({"text": "a", "rid": 5})", "rid", "must be a string");
  check(R"({"text": "a", "sampling_params": [1]})", "sampling_params", "must be an object");
  const auto not_json = curl(f.port(), "POST", "/generate", "{text");
  CHECK(not_json.status == 400);
  CHECK_THAT(not_json.json()["error"]["message"].get<std::string>(), Catch::Contains("JSON object"));
}

TEST_CASE("The server and model descriptions name the model, its context and the replica", "[sglang]") {
  SglangFixture f;
  for (const char* path : {"/get_server_info", "/server_info"}) {
    const auto r = curl(f.port(), "GET", path);
    REQUIRE(r.status == 200);
    CHECK(r.json()["served_model_name"] == "fake-model");
    CHECK(r.json()["replica_name"] == "replica-7");
    CHECK(r.json()["context_length"] == 512);
    CHECK(r.json()["max_total_num_tokens"] == 65536);
  }
  for (const char* path : {"/get_model_info", "/model_info"}) {
    const auto r = curl(f.port(), "GET", path);
    REQUIRE(r.status == 200);
    CHECK(r.json()["is_generation"] == true);
    CHECK(r.json()["served_model_name"] == "fake-model");
  }
}

TEST_CASE("GET /get_load reports the live requests and the KV tokens they hold", "[sglang]") {
  SglangFixture f({.step_interval = std::chrono::milliseconds(5), .max_context = 100000});
  const auto idle = curl(f.port(), "GET", "/get_load");
  REQUIRE(idle.status == 200);
  CHECK(idle.json() == json::parse(R"([{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}])"));
  auto long_request = std::async(std::launch::async, [&] {
    return f.post("/generate", {{"text", "busy"}, {"sampling_params", {{"max_new_tokens", 400}, {"ignore_eos", true}}}});
  });
  REQUIRE(test::eventually([&] { return f.backend.stats().kv.used_slots > 10; }));
  const json load = curl(f.port(), "GET", "/get_load").json();
  REQUIRE(load.is_array());
  REQUIRE(load.size() == 1);
  CHECK(load[0]["num_reqs"] == 1);
  // The slots grow with every step: bounded by the stats read before and after.
  const auto after = f.backend.stats().kv.used_slots;
  CHECK(load[0]["num_tokens"].get<uint64_t>() > 10);
  CHECK(load[0]["num_tokens"].get<uint64_t>() <= after);
  CHECK(long_request.get().status == 200);
}

TEST_CASE("GET /health_generate is healthy when a token comes, 503 once draining", "[sglang]") {
  SglangFixture f;
  const auto ok = curl(f.port(), "GET", "/health_generate");
  CHECK(ok.status == 200);
  CHECK(ok.json()["status"] == "ok");
  f.server.http()->start_draining();
  const auto draining = curl(f.port(), "GET", "/health_generate");
  CHECK(draining.status == 503);
  CHECK(draining.json()["reason"] == "draining");
  CHECK(curl(f.port(), "POST", "/generate", R"({"text": "late"})").status == 503);
}

TEST_CASE("Every metric sample carries the replica's name, or HOST:PORT by default", "[sglang]") {
  SglangFixture named;
  named.post("/generate", {{"text", "x"}, {"sampling_params", {{"max_new_tokens", 2}}}});
  const std::string body = curl(named.port(), "GET", "/metrics").body;
  CHECK_THAT(body, Catch::Contains("llmk_requests_total{frontend=\"http\",finish_reason=\"length\",replica=\"replica-7\"} 1"));
  CHECK_THAT(body, Catch::Contains("llmk_generation_tokens_total{replica=\"replica-7\"} 2"));
  CHECK_THAT(body, Catch::Contains("llmk_time_to_first_token_seconds_bucket{le=\"+Inf\",replica=\"replica-7\"} 1"));
  // No sample line without it.
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') CHECK_THAT(line, Catch::Contains("replica=\"replica-7\"}"));
  }

  FakeBackend backend;
  Server unnamed(backend, {.http = "127.0.0.1:0", .zmq = ""});
  const int port = unnamed.http()->port();
  CHECK_THAT(curl(port, "GET", "/metrics").body,
             Catch::Contains("llmk_engine_steps_total{replica=\"127.0.0.1:" + std::to_string(port) + "\"}"));
}

TEST_CASE("A bodiless POST is refused with a 400 that names the route and the missing length", "[sglang]") {
  SglangFixture f;
  const auto bodiless = curl(f.port(), "GET", "/generate", "", "-X POST");
  CHECK(bodiless.status == 400);
  CHECK_THAT(bodiless.json()["error"]["message"].get<std::string>(),
             Catch::Contains("POST /generate") && Catch::Contains("Content-Length"));
}

TEST_CASE("POST /flush_cache as the routers send it (no body, no length) answers 200 with the blocks dropped",
          "[sglang]") {
  SglangFixture f;
  // 40 and 60 bytes plus BOS: 41 tokens (2 full blocks of 16) and 61 tokens
  // (3), the second prompt starting with the first: 3 distinct prefixes.
  const std::string first(40, 'a');
  const std::string second = first + std::string(20, 'b');
  for (const auto& text : {first, second}) {
    REQUIRE(f.post("/generate", {{"text", text}, {"sampling_params", {{"max_new_tokens", 2}}}}).status == 200);
  }
  const auto flushed = curl(f.port(), "GET", "/flush_cache", "", "-X POST");
  REQUIRE(flushed.status == 200);
  CHECK(flushed.json() == json({{"status", "ok"}, {"num_dropped_blocks", 3}}));
  // Nothing is left to drop; GET is served too, and a POST with a body.
  const auto again = curl(f.port(), "GET", "/flush_cache");
  REQUIRE(again.status == 200);
  CHECK(again.json()["num_dropped_blocks"] == 0);
  const auto with_body = f.post("/flush_cache", json::object());
  REQUIRE(with_body.status == 200);
  CHECK(with_body.json()["num_dropped_blocks"] == 0);
}
