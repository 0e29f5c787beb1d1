// A chat request's tools and tool_choice as parse_openai_request reads them:
// every malformed tool or choice refused naming its field; none keeps the
// tools from the template and the output unread; auto offers them and reads
// the output in the model's family format; required and named build the
// JSON Schema the structured-output engine holds the output to (and refuse a
// second grammar beside it), and the outputs of that shape parse into calls.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/grammar.hpp"
#include "ipc/errors.hpp"
#include "ipc/openai.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "ipc/tool_choice.hpp"
#include "tool_calls_support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using ojson = nlohmann::ordered_json;
using nlohmann::json;

namespace {

ojson chat_body(const ojson& extra) {
  ojson body = {{"messages", ojson::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})}};
  for (const auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

// A fake model that, as an engine with XGrammar on the CPU executor does,
// takes structured outputs (the fake itself never follows a grammar).
class HeldBackend : public FakeBackend {
 public:
  using FakeBackend::FakeBackend;
  ModelInfo model_info() const override {
    ModelInfo info = FakeBackend::model_info();
    info.structured_outputs_refusal.clear();
    return info;
  }
};

OpenAiRequest parse(const ojson& body, ToolParser parser = ToolParser::hermes) {
  FakeBackendOptions options;
  options.tool_parser = parser;
  HeldBackend backend(options);
  return parse_openai_request(OpenAiEndpoint::chat, body.dump(), backend);
}

// The field a refused body names, and its message.
std::pair<std::string, std::string> refusal(const ojson& body, ToolParser parser = ToolParser::hermes) {
  try {
    parse(body, parser);
  } catch (const FieldError& e) {
    return {e.field(), e.what()};
  }
  return {"", "accepted"};
}

ojson tools() { return ojson::parse(test::kToolsJson); }

}  // namespace

TEST_CASE("Malformed tools and tool_choice are refused naming the field and the problem", "[tool_calls]") {
  const ojson weather = tools()[0];
  const auto with_tool = [&](const char* pointer, const ojson& value) {
    ojson t = weather;
    t[ojson::json_pointer(pointer)] = value;
    return chat_body({{"tools", ojson::array({t})}});
  };
  struct Case {
    const char* what;
    ojson body;
    std::string field;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"tools not a list", chat_body({{"tools", weather}}), "tools", "must be a list"},
      {"a tool not an object", chat_body({{"tools", ojson::array({"get_weather"})}}), "tools[0]", "must be an object"},
      {"a tool of another type", with_tool("/type", "retrieval"), "tools[0].type", "\"function\""},
      {"no function", chat_body({{"tools", ojson::array({ojson{{"type", "function"}}})}}), "tools[0].function", "must be an object"},
      {"a nameless function", with_tool("/function/name", ""), "tools[0].function.name", "non-empty string"},
      {"a schema that is not JSON", with_tool("/function/parameters", "{\"type\": \"object\", "),
       "tools[0].function.parameters", "not JSON"},
      {"a schema given as a JSON string", with_tool("/function/parameters", "{\"type\": \"object\"}"),
       "tools[0].function.parameters", "not a string"},
      {"a schema that is a list", with_tool("/function/parameters", ojson::array()), "tools[0].function.parameters",
       "JSON Schema object"},
      {"a schema of another type", with_tool("/function/parameters", {{"type", "string"}}),
       "tools[0].function.parameters", "\"object\""},
      {"a tool listed twice", chat_body({{"tools", ojson::array({weather, weather})}}), "tools[1].function.name", "twice"},
      {"an unknown tool_choice", chat_body({{"tools", tools()}, {"tool_choice", "any"}}), "tool_choice", "\"any\""},
      {"a tool_choice object without a name", chat_body({{"tools", tools()}, {"tool_choice", {{"type", "function"}}}}),
       "tool_choice", "must be"},
      {"a named tool_choice not among the tools",
       chat_body({{"tools", tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_news"}}}}}}),
       "tool_choice", "get_news"},
      {"required without tools", chat_body({{"tool_choice", "required"}}), "tool_choice", "needs a non-empty 'tools'"},
  };
  for (const Case& c : cases) {
    INFO(c.what << ": " << c.body.dump());
    const auto [field, message] = refusal(c.body);
    CHECK(field == c.field);
    CHECK_THAT(message, Catch::Contains(c.says));
  }
  // Over the wire: a 400 whose param is the field.
  try {
    parse(with_tool("/function/parameters", "{not json"));
    FAIL("accepted");
  } catch (const std::exception& e) {
    const ErrorReply reply = error_reply(e);
    CHECK(reply.http_status == 400);
    CHECK(reply.param == "tools[0].function.parameters");
  }
}

TEST_CASE("tool_choice none keeps the tools from the template; auto offers them and reads the family's format",
          "[tool_calls]") {
  const OpenAiRequest plain = parse(chat_body({}));
  CHECK(plain.request.chat->options.tools.is_undefined());
  CHECK(plain.tool_format.parser == ToolParser::none);

  for (const ojson& choice : {ojson(nullptr), ojson("auto")}) {
    INFO("tool_choice " << choice.dump());
    ojson body = chat_body({{"tools", tools()}});
    if (!choice.is_null()) body["tool_choice"] = choice;
    const OpenAiRequest r = parse(body, ToolParser::mistral);
    REQUIRE(r.request.chat->options.tools.is_list());
    CHECK(r.request.chat->options.tools.as_list().size() == 2);
    CHECK(r.tool_format.parser == ToolParser::mistral);
    CHECK(r.tool_format.shape == ToolOutputFormat::Shape::family);
  }
  const OpenAiRequest none = parse(chat_body({{"tools", tools()}, {"tool_choice", "none"}}));
  CHECK(none.request.chat->options.tools.is_undefined());
  CHECK(none.tool_format.parser == ToolParser::none);
  // A model with no tool format: the tools reach the template, the output stays text.
  const OpenAiRequest unread = parse(chat_body({{"tools", tools()}}), ToolParser::none);
  CHECK(unread.request.chat->options.tools.is_list());
  CHECK(unread.tool_format.parser == ToolParser::none);
}

TEST_CASE("tool_choice required and named build the JSON Schema of their output, whose shapes parse into calls",
          "[tool_calls]") {
  ToolRequest required = parse_tool_request(chat_body({{"tools", tools()}, {"tool_choice", "required"}}));
  REQUIRE(required.choice == ToolChoiceMode::required);
  const ojson schema = tool_choice_schema(required);
  CHECK(schema["type"] == "array");
  CHECK(schema["minItems"] == 1);
  REQUIRE(schema["items"]["anyOf"].size() == 2);
  CHECK(schema["items"]["anyOf"][1]["properties"]["name"]["enum"] == ojson::array({"get_time"}));
  CHECK(schema["items"]["anyOf"][1]["properties"]["parameters"] == tools()[1]["function"]["parameters"]);

  ToolRequest named = parse_tool_request(chat_body(
      {{"tools", tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}));
  REQUIRE(named.choice == ToolChoiceMode::named);
  CHECK(named.named_tool == "get_time");
  CHECK(tool_choice_schema(named) == tools()[1]["function"]["parameters"]);

  // Outputs of those shapes: checked against the schemas (jsonschema when
  // the venv has it) and parsed into calls.
  const std::string list_output =
      R"([{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "get_time", "parameters": {"timezone": "UTC"}}])";
  const std::string named_output = R"({"timezone": "Asia/Tokyo"})";
  const json checks = json::array(
      {{{"schema", json::parse(schema.dump())}, {"instance", json::parse(list_output)}},
       {{"schema", json::parse(schema.dump())}, {"instance", json::array()}},
       {{"schema", json::parse(schema.dump())}, {"instance", json::parse(R"([{"name": "get_news", "parameters": {}}])")}},
       {{"schema", json::parse(tool_choice_schema(named).dump())}, {"instance", json::parse(named_output)}}});
  if (const auto verdicts = test::jsonschema_verdicts(checks)) {
    CHECK(*verdicts == std::vector<bool>{true, false, false, true});
  } else {
    WARN("jsonschema is not in the venv: the schemas' shape is checked above, not run");
  }
  for (ToolParser family : {ToolParser::hermes, ToolParser::mistral}) {
    const ParsedToolOutput listed = parse_tool_output(tool_output_format(required, family), list_output);
    REQUIRE(listed.calls.size() == 2);
    CHECK(listed.calls[0].name == "get_weather");
    CHECK(listed.calls[1].arguments == R"({"timezone": "UTC"})");
    CHECK(listed.calls[0].id.size() == (family == ToolParser::mistral ? 9u : 29u));
    CHECK_FALSE(listed.content);
    const ParsedToolOutput one = parse_tool_output(tool_output_format(named, family), named_output);
    REQUIRE(one.calls.size() == 1);
    CHECK(one.calls[0].name == "get_time");
    CHECK(one.calls[0].arguments == named_output);
  }
}

TEST_CASE("tool_choice required or named holds the output to its JSON Schema, and refuses a second grammar",
          "[tool_calls]") {
  for (const ojson& choice :
       {ojson("required"), ojson({{"type", "function"}, {"function", {{"name", "get_weather"}}}})}) {
    INFO(choice.dump());
    const ojson body = chat_body({{"tools", tools()}, {"tool_choice", choice}});
    const OpenAiRequest r = parse(body);
    const auto& so = r.request.sampling.structured;
    REQUIRE(so != nullptr);
    CHECK(so->kind == GrammarKind::json_schema);
    CHECK(so->field == "tool_choice");  // the engine's refusal of the schema names it
    CHECK(ojson::parse(so->text) == tool_choice_schema(parse_tool_request(body)));
    CHECK(r.tool_format.shape == (choice.is_string() ? ToolOutputFormat::Shape::call_list
                                                     : ToolOutputFormat::Shape::arguments));
    // Read as calls even for a model with no tool format of its own.
    CHECK(parse(body, ToolParser::none).tool_format.reads_calls());
    // One grammar a request: response_format beside it is refused, naming both.
    for (const char* other : {"response_format", "guided_regex"}) {
      ojson both = body;
      both[other] = std::string(other) == "guided_regex" ? ojson("a+") : ojson({{"type", "json_object"}});
      auto [field, message] = refusal(both);
      CHECK(field == "tool_choice");
      CHECK_THAT(message, Catch::Contains(other));
    }
  }
  // Where structured outputs are not served, both are refused as unsupported, naming tool_choice.
  FakeBackend unserved;
  for (const ojson& choice : {ojson("required"), ojson({{"type", "function"}, {"function", {{"name", "get_time"}}}})}) {
    try {
      parse_openai_request(OpenAiEndpoint::chat, chat_body({{"tools", tools()}, {"tool_choice", choice}}).dump(),
                           unserved);
      FAIL("accepted");
    } catch (const FieldError& e) {
      CHECK(e.field() == "tool_choice");
      CHECK(e.code() == ErrorCode::unsupported);
    }
  }
  // auto and none ask for no grammar.
  CHECK(parse(chat_body({{"tools", tools()}, {"tool_choice", "auto"}})).request.sampling.structured == nullptr);
  CHECK(parse(chat_body({{"tools", tools()}, {"tool_choice", "none"}})).request.sampling.structured == nullptr);
}

TEST_CASE("A Mistral model's tool turns need their 9-character call ids; other families take them without",
          "[tool_calls]") {
  const ojson turns = ojson::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123XYZ", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "abc123XYZ", "content": "21"}])");
  CHECK_NOTHROW(parse({{"messages", turns}, {"tools", tools()}}, ToolParser::mistral));

  ojson no_id = turns;
  no_id[2].erase("tool_call_id");
  auto [field, message] = refusal({{"messages", no_id}, {"tools", tools()}}, ToolParser::mistral);
  CHECK(field == "messages[2].tool_call_id");
  CHECK_THAT(message, Catch::Contains("required"));
  CHECK(refusal({{"messages", no_id}, {"tools", tools()}}, ToolParser::hermes).first.empty());

  ojson long_id = turns;
  long_id[1]["tool_calls"][0]["id"] = "call_0123456789";
  std::tie(field, message) = refusal({{"messages", long_id}, {"tools", tools()}}, ToolParser::mistral);
  CHECK(field == "messages[1].tool_calls[0].id");
  CHECK_THAT(message, Catch::Contains("9 alphanumerics"));
}
