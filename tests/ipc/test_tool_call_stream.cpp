// Chat responses with tools (OpenAiResponse): the same engine events shaped
// as SSE chunks and as one body. The chunks' delta.tool_calls, joined as an
// OpenAI client joins them (by index: id and name once, arguments
// appended), give the body's tool_calls; no chunk's content shows a call
// marker, even one cut across events; finish_reason is "tool_calls" when
// calls were made; without tools the responses are as before.
#include <catch2/catch.hpp>

#include "ipc/openai.hpp"
#include "ipc/testing/fake_backend.hpp"

using namespace llmk;
using namespace llmk::ipc;
using nlohmann::json;

namespace {

// The output cut into events at `cuts`; the last one finished with `reason`.
std::vector<RequestEvent> events_of(const std::string& text, const std::vector<size_t>& cuts,
                                    FinishReason reason = FinishReason::stop) {
  std::vector<RequestEvent> out;
  size_t from = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(text.size());
  for (size_t end : ends) {
    RequestEvent ev;
    ev.request_id = "r";
    ev.text_delta = text.substr(from, end - from);
    ev.token_ids = {7};
    from = end;
    out.push_back(std::move(ev));
  }
  out.back().finished = true;
  out.back().finish_reason = reason;
  out.back().request_done = true;
  out.back().usage.prompt_tokens = 5;
  out.back().usage.completion_tokens = static_cast<int32_t>(out.size());
  return out;
}

struct Streamed {
  std::string content;
  json tool_calls = json::array();
  std::string finish_reason;
  std::vector<std::string> contents;  // each chunk's content
};

Streamed stream(const Backend& backend, const ToolOutputFormat& format, const std::vector<RequestEvent>& events) {
  OpenAiResponse response(OpenAiEndpoint::chat, "chatcmpl-1", "m", backend, 1, false, format);
  Streamed out;
  bool first = true;
  for (const auto& ev : events) {
    for (const json& chunk : response.chunks(ev)) {
      REQUIRE(chunk["object"] == "chat.completion.chunk");
      const json& choice = chunk["choices"][0];
      const json& delta = choice["delta"];
      if (first) CHECK(delta["role"] == "assistant");
      first = false;
      if (delta.contains("content") && delta["content"].is_string()) {
        out.content += delta["content"].get<std::string>();
        out.contents.push_back(delta["content"]);
      }
      for (const json& tc : delta.value("tool_calls", json::array())) {
        const size_t index = tc["index"];
        if (tc.contains("id")) {
          REQUIRE(index == out.tool_calls.size());
          CHECK(tc["type"] == "function");
          out.tool_calls.push_back({{"id", tc["id"]},
                                    {"type", "function"},
                                    {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
        }
        REQUIRE(index < out.tool_calls.size());
        auto& args = out.tool_calls[index]["function"]["arguments"];
        args = args.get<std::string>() + tc["function"].value("arguments", "");
      }
      if (!choice["finish_reason"].is_null()) out.finish_reason = choice["finish_reason"];
    }
  }
  return out;
}

json whole(const Backend& backend, const ToolOutputFormat& format, const std::vector<RequestEvent>& events) {
  OpenAiResponse response(OpenAiEndpoint::chat, "chatcmpl-1", "m", backend, 1, false, format);
  for (const auto& ev : events) response.add(ev);
  return response.response()["choices"][0];
}

ToolOutputFormat format_of(ToolParser parser) {
  ToolOutputFormat f;
  f.parser = parser;
  return f;
}

// Each call's name and arguments (ids are made anew per response).
json without_ids(json calls) {
  for (auto& c : calls) c.erase("id");
  return calls;
}

}  // namespace

TEST_CASE("Streamed chunks with tools join into the body's tool_calls, markers never shown as content",
          "[tool_calls][stream]") {
  FakeBackend backend;
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n</tool_call>";
  const json body = whole(backend, format_of(ToolParser::hermes), events_of(text, {}));
  CHECK(body["finish_reason"] == "tool_calls");
  CHECK(body["message"]["role"] == "assistant");
  CHECK(body["message"]["content"] == "Let me check.");
  REQUIRE(body["message"]["tool_calls"].size() == 2);
  CHECK(body["message"]["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(body["message"]["tool_calls"][0]["function"]["arguments"] == "{\"city\": \"Paris\"}");
  CHECK(body["message"]["tool_calls"][1]["type"] == "function");
  CHECK(body["message"]["tool_calls"][1]["id"].get<std::string>().rfind("call_", 0) == 0);

  // Events cut everywhere in turn: inside "<tool_call>", inside the JSON,
  // inside "</tool_call>"; and one byte per event.
  std::vector<std::vector<size_t>> cutss;
  for (size_t k = 1; k < text.size(); k += 3) cutss.push_back({k, std::min(text.size() - 1, k + 7)});
  std::vector<size_t> bytes;
  for (size_t k = 1; k < text.size(); ++k) bytes.push_back(k);
  cutss.push_back(bytes);
  for (const auto& cuts : cutss) {
    INFO("events cut at " << cuts[0] << ", " << cuts[1]);
    const Streamed s = stream(backend, format_of(ToolParser::hermes), events_of(text, cuts));
    CHECK(s.content == "Let me check.");
    CHECK(s.finish_reason == "tool_calls");
    CHECK(without_ids(s.tool_calls) == without_ids(body["message"]["tool_calls"]));
    for (const auto& c : s.contents) CHECK(c.find('<') == std::string::npos);
  }
}

TEST_CASE("With tools, an output that makes no call streams and answers as plain text", "[tool_calls][stream]") {
  FakeBackend backend;
  // A marker's first characters, and JSON that is not a call: text after all.
  for (const auto& [parser, text] : std::vector<std::pair<ToolParser, std::string>>{
           {ToolParser::hermes, "Use <tool_ca and <b> tags. "},
           {ToolParser::llama3_json, "{\"answer\": 42} is the JSON."},
           {ToolParser::mistral, "[1, 2] and [TOOL_"}}) {
    INFO(text);
    const json body = whole(backend, format_of(parser), events_of(text, {3, 9}));
    CHECK(body["message"]["content"] == text);
    CHECK_FALSE(body["message"].contains("tool_calls"));
    CHECK(body["finish_reason"] == "stop");
    const Streamed s = stream(backend, format_of(parser), events_of(text, {3, 9}));
    CHECK(s.content == text);
    CHECK(s.tool_calls.empty());
    CHECK(s.finish_reason == "stop");
  }
  // A call cut short by max_tokens: the stream has begun it, the body keeps
  // the text; finish_reason stays "length".
  const std::string cut = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
  const json body = whole(backend, format_of(ToolParser::hermes), events_of(cut, {20}, FinishReason::length));
  CHECK(body["message"]["content"] == cut);
  CHECK(body["finish_reason"] == "length");
  CHECK(stream(backend, format_of(ToolParser::hermes), events_of(cut, {20}, FinishReason::length)).finish_reason ==
        "length");
}

TEST_CASE("Without tools a chat response is the text as content, streamed and not", "[tool_calls][stream]") {
  FakeBackend backend;
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  const json body = whole(backend, {}, events_of(text, {4}));
  CHECK(body["message"] == json({{"role", "assistant"}, {"content", text}}));
  CHECK(body["finish_reason"] == "stop");
  const Streamed s = stream(backend, {}, events_of(text, {4}));
  CHECK(s.content == text);
  CHECK(s.contents == std::vector<std::string>{"", text.substr(0, 4), text.substr(4)});
}
