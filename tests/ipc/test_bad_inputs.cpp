// The bad-input matrix: every malformed or invalid request, over HTTP and
// ZeroMQ, gets its own error reply (status, code, param) while good
// streaming requests on both front ends keep producing exactly their tokens.
#include <catch2/catch.hpp>

#include <future>

#include "ipc/client.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "ipc/server.hpp"
#include "support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::curl;
using llmk::test::RawPeer;
using nlohmann::json;

namespace {

struct HttpCase {
  const char* name;
  std::string method, path, body;
  int status;
  std::string code;
  std::string param;  // "" = not checked
};

struct ZmqCase {
  const char* name;
  std::vector<std::string> frames;
  std::string code;
  json id;  // the id the error must echo (null when none)
};

std::string submit(const json& fields) {
  json j = {{"v", 1}, {"type", "submit"}, {"id", "bad"}, {"prompt", "hi"}};
  for (const auto& [k, v] : fields.items()) {
    if (v.is_null()) {
      j.erase(k);
    } else {
      j[k] = v;
    }
  }
  return j.dump();
}

}  // namespace

TEST_CASE("Each bad request gets the right error while concurrent good requests stream correctly", "[bad_input]") {
  FakeBackend backend({.step_interval = std::chrono::milliseconds(2), .max_context = 512});
  Server server(backend, {.http = "127.0.0.1:0", .zmq = "tcp://127.0.0.1:*", .max_body_bytes = 64 << 10});
  const int port = server.http()->port();
  const std::string endpoint = server.zmq()->endpoint();

  // Good traffic on both front ends, running through the whole matrix.
  Client client(endpoint);
  std::vector<std::future<Client::Result>> zmq_good;
  for (int i = 0; i < 4; ++i) {
    zmq_good.push_back(std::async(std::launch::async, [&client, i] {
      Request r;
      r.id = "good" + std::to_string(i);
      r.prompt = "good prompt " + std::to_string(i);
      r.sampling.temperature = 0;
      r.sampling.max_tokens = 300;
      return client.generate(r);
    }));
  }
  std::vector<std::future<test::HttpResult>> http_good;
  for (int i = 0; i < 2; ++i) {
    http_good.push_back(std::async(std::launch::async, [port, i] {
      const json body = {{"prompt", "http good " + std::to_string(i)}, {"max_tokens", 300}, {"temperature", 0},
                         {"stream", true}};
      return curl(port, "POST", "/v1/completions", body.dump());
    }));
  }

  const std::string long_prompt(600, 'x');
  const std::vector<HttpCase> http_cases = {
      {"malformed JSON", "POST", "/v1/completions", "{\"prompt\": ", 400, "malformed", ""},
      {"a body that is not an object", "POST", "/v1/completions", "[1, 2]", 400, "malformed", ""},
      {"an empty body", "POST", "/v1/completions", "", 400, "malformed", ""},
      {"invalid UTF-8", "POST", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, "malformed", ""},
      {"a number too large for a double", "POST", "/v1/completions", R"({"prompt": "a", "seed": 5e555555})", 400,
       "malformed", ""},
      {"no prompt", "POST", "/v1/completions", R"({"max_tokens": 4})", 400, "invalid_argument", "prompt"},
      {"a numeric prompt", "POST", "/v1/completions", R"({"prompt": 3})", 400, "invalid_argument", "prompt"},
      {"an empty prompt", "POST", "/v1/completions", R"({"prompt": ""})", 400, "invalid_argument", "prompt"},
      {"a token id outside the vocabulary", "POST", "/v1/completions", R"({"prompt": [5, 999999]})", 400,
       "invalid_argument", "prompt"},
      {"negative max_tokens", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": -1})", 400,
       "invalid_argument", "max_tokens"},
      {"huge max_tokens", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 1000000000000})", 400,
       "invalid_argument", "max_tokens"},
      {"max_tokens as a string", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": "5"})", 400,
       "invalid_argument", "max_tokens"},
      {"negative temperature", "POST", "/v1/completions", R"({"prompt": "a", "temperature": -0.5})", 400,
       "invalid_argument", "temperature"},
      {"top_p of zero", "POST", "/v1/completions", R"({"prompt": "a", "top_p": 0})", 400, "invalid_argument", "top_p"},
      {"n of zero", "POST", "/v1/completions", R"({"prompt": "a", "n": 0})", 400, "invalid_argument", "n"},
      {"a stop list holding a number", "POST", "/v1/completions", R"({"prompt": "a", "stop": ["x", 3]})", 400,
       "invalid_argument", "stop"},
      {"too many logprobs", "POST", "/v1/completions", R"({"prompt": "a", "logprobs": 50})", 400,
       "invalid_argument", "logprobs"},
      {"a fractional seed", "POST", "/v1/completions", R"({"prompt": "a", "seed": 1.5})", 400, "invalid_argument",
       "seed"},
      {"stream as a string", "POST", "/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400,
       "invalid_argument", "stream"},
      {"echo", "POST", "/v1/completions", R"({"prompt": "a", "echo": true})", 400, "unsupported", "echo"},
      {"a suffix", "POST", "/v1/completions", R"({"prompt": "a", "suffix": "z"})", 400, "unsupported", "suffix"},
      {"best_of 3", "POST", "/v1/completions", R"({"prompt": "a", "best_of": 3})", 400, "unsupported", "best_of"},
      {"logit_bias", "POST", "/v1/completions", R"({"prompt": "a", "logit_bias": {"5": 100}})", 400, "unsupported",
       "logit_bias"},
      {"a JSON response_format", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})", 400,
       "unsupported", "response_format"},
      {"a JSON-schema response_format", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "a", "schema": {"type": "object"}}}})", 400, "unsupported", "response_format"},
      {"a response_format of an unknown type", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})", 400,
       "invalid_argument", "response_format"},
      {"structured_outputs with two grammars", "POST", "/v1/completions",
       R"({"prompt": "a", "structured_outputs": {"regex": "a", "grammar": "root ::= \"a\""}})", 400,
       "invalid_argument", "structured_outputs"},
      {"a guided_regex that is not a string", "POST", "/v1/completions", R"({"prompt": "a", "guided_regex": 5})", 400,
       "invalid_argument", "guided_regex"},
      {"a guided_regex beside a response_format", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"},
           "guided_regex": "a"})", 400, "invalid_argument", "guided_regex"},
      {"a tool schema that is not JSON", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
           "function": {"name": "f", "parameters": "{\"type\": obj"}}]})", 400, "invalid_argument",
       "tools[0].function.parameters"},
      {"a required tool_choice without tools", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", 400, "invalid_argument",
       "tool_choice"},
      {"tool_choice naming a tool not offered", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
           "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})", 400,
       "invalid_argument", "tool_choice"},
      {"legacy functions", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})", 400, "unsupported",
       "functions"},
      {"audio modalities", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]})", 400, "unsupported",
       "modalities"},
      {"a temperature past the engine's bound", "POST", "/v1/completions", R"({"prompt": "a", "temperature": 101})",
       400, "invalid_argument", "temperature"},
      {"a repetition_penalty of zero", "POST", "/v1/completions",
       R"({"prompt": "a", "repetition_penalty": 0})", 400, "invalid_argument", "repetition_penalty"},
      {"top_logprobs past the bound", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", 400,
       "invalid_argument", "top_logprobs"},
      {"a prompt longer than the context", "POST", "/v1/completions",
       json({{"prompt", long_prompt}, {"max_tokens", 4}}).dump(), 400, "invalid_argument", ""},
      {"a streamed prompt longer than the context", "POST", "/v1/completions",
       json({{"prompt", long_prompt}, {"max_tokens", 4}, {"stream", true}}).dump(), 400, "invalid_argument", ""},
      {"an unknown model", "POST", "/v1/completions", R"({"model": "gpt-9", "prompt": "a"})", 404, "not_found",
       "model"},
      {"empty messages", "POST", "/v1/chat/completions", R"({"messages": []})", 400, "invalid_argument", "messages"},
      {"a message without a role", "POST", "/v1/chat/completions", R"({"messages": [{"content": "x"}]})", 400,
       "invalid_argument", "messages"},
      {"an unknown role", "POST", "/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})",
       400, "invalid_argument", "messages"},
      {"top_logprobs without logprobs", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400, "invalid_argument",
       "top_logprobs"},
      {"an unknown route", "GET", "/v1/nothing", "", 404, "unknown_type", ""},
      {"an oversized body", "POST", "/v1/completions",
       json({{"prompt", std::string(100 << 10, 'a')}}).dump(), 413, "payload_too_large", ""},
  };
  for (const auto& c : http_cases) {
    INFO("HTTP: " << c.name);
    const auto r = curl(port, c.method, c.path, c.body);
    CHECK(r.status == c.status);
    const json body = r.json();
    REQUIRE(body.is_object());
    CHECK(body["error"]["code"] == c.code);
    CHECK(body["error"]["message"].get<std::string>().size() > 0);
    CHECK(body["error"].contains("type"));
    if (!c.param.empty()) CHECK(body["error"]["param"] == c.param);
  }

  const std::vector<ZmqCase> zmq_cases = {
      {"malformed JSON", {"{\"v\": 1, "}, "malformed", nullptr},
      {"a payload that is not an object", {"[1]"}, "malformed", nullptr},
      {"an empty payload (a truncated message)", {""}, "malformed", nullptr},
      {"invalid UTF-8", {"{\"v\": 1, \"type\": \"health\", \"x\": \"\xc3\x28\"}"}, "malformed", nullptr},
      {"a number too large for a double", {"{\"v\": 1, \"type\": \"health\", \"x\": 1e999999}"}, "malformed", nullptr},
      {"extra frames", {"{\"v\": 1, \"type\": \"health\"}", "{}"}, "malformed", nullptr},
      {"extra frames after a delimiter", {"", "{\"v\": 1, \"type\": \"health\"}", "{}"}, "malformed", nullptr},
      {"an unknown protocol version", {R"({"v": 2, "type": "health"})"}, "unsupported_version", nullptr},
      {"a missing version", {R"({"type": "submit", "id": "m", "prompt": "a"})"}, "unsupported_version", "m"},
      {"an unknown type", {R"({"v": 1, "type": "launch"})"}, "unknown_type", nullptr},
      {"a numeric id", {submit({{"id", 5}})}, "invalid_argument", nullptr},
      {"no prompt", {submit({{"prompt", nullptr}})}, "invalid_argument", "bad"},
      {"both prompt and token ids", {submit({{"prompt_token_ids", {1, 2}}})}, "invalid_argument", "bad"},
      {"an unknown parameter", {submit({{"params", {{"temprature", 0.5}}}})}, "invalid_argument", "bad"},
      {"negative max_tokens", {submit({{"params", {{"max_tokens", -4}}}})}, "invalid_argument", "bad"},
      {"params that are not an object", {submit({{"params", "fast"}})}, "invalid_argument", "bad"},
      {"a prompt longer than the context", {submit({{"prompt", long_prompt}})}, "invalid_argument", "bad"},
      {"a cancel of an unknown id", {R"({"v": 1, "type": "cancel", "id": "nobody"})"}, "not_found", "nobody"},
      {"an oversized message", {submit({{"prompt", std::string(100 << 10, 'a')}})}, "payload_too_large", nullptr},
  };
  RawPeer peer(endpoint);
  for (const auto& c : zmq_cases) {
    INFO("ZeroMQ: " << c.name);
    peer.send_frames(c.frames);
    const json reply = peer.recv_json();
    REQUIRE(reply.is_object());
    CHECK(reply["v"] == 1);
    CHECK(reply["type"] == "error");
    CHECK(reply["code"] == c.code);
    CHECK(reply["id"] == c.id);
  }
  {
    INFO("ZeroMQ: a duplicate live id");
    peer.send_frames({submit({{"id", "dup"}, {"params", {{"max_tokens", 200}}}})});
    peer.send_frames({submit({{"id", "dup"}})});
    json reply;
    do {
      reply = peer.recv_json();
    } while (reply.is_object() && reply["type"] == "token");
    CHECK(reply["type"] == "error");
    CHECK(reply["code"] == "invalid_argument");
    CHECK(reply["param"] == "id");
  }

  CHECK(http_cases.size() + zmq_cases.size() + 1 >= 30);
  for (int i = 0; i < 4; ++i) {
    const auto result = zmq_good[static_cast<size_t>(i)].get();
    CHECK(result.texts[0] ==
          FakeBackend::expected_text(FakeBackend::tokenize("good prompt " + std::to_string(i), true), 300));
  }
  for (int i = 0; i < 2; ++i) {
    const auto r = http_good[static_cast<size_t>(i)].get();
    REQUIRE(r.status == 200);
    std::string text;
    for (const auto& data : test::sse_data(r.body)) {
      if (data != "[DONE]") text += json::parse(data)["choices"][0]["text"].get<std::string>();
    }
    CHECK(text == FakeBackend::expected_text(FakeBackend::tokenize("http good " + std::to_string(i), true), 300));
  }
}
