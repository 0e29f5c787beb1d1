// Acceptance (tool calls parse and validate for each family's template):
// for Llama 3.1, Qwen2.5 and Mistral v0.3 (tests/data/chat_templates/), a
// request with tools renders as PyPI's jinja2 renders it; outputs written by
// hand in the family's published format (several calls, with and without
// text before them) parse into those calls, with arguments valid for the
// tool's parameters schema; the calls fed back as an assistant message plus
// tool results render as jinja2 renders them; and streamed in any two
// pieces, or byte by byte, an output reassembles into the same result.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>

#include "core/chat_template.hpp"
#include "core/error.hpp"
#include "core/jinja_reference.hpp"
#include "ipc/openai.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "ipc/tool_call_parser.hpp"
#include "support/skip.hpp"
#include "tool_calls_support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using ojson = nlohmann::ordered_json;
using nlohmann::json;

namespace {

const std::string kTemplates = std::string(LLMK_SOURCE_DIR) + "/tests/data/chat_templates/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct ExpectedCall {
  std::string name;
  std::string arguments;  // the JSON text the model wrote
};

struct Output {
  std::string text;                    // what the model writes
  std::optional<std::string> content;  // what is left as content
  std::vector<ExpectedCall> calls;
};

struct Family {
  std::string file;
  std::string bos;
  std::string eos;
  ToolParser parser;
  std::vector<Output> outputs;
};

// The outputs follow each family's published format: Llama 3.1's JSON
// tool calling ({"name", "parameters"}, after <|python_tag|> or alone, ';'
// between calls), Qwen2.5's (Hermes) <tool_call> blocks, Mistral's
// [TOOL_CALLS] list (the marker a control token that decoding drops, so
// also without it).
std::vector<Family> families() {
  return {
      {"llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>", ToolParser::llama3_json,
       {{R"({"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}})",
         std::nullopt,
         {{"get_weather", R"({"city": "Paris", "unit": "celsius"})"}}},
        {R"(<|python_tag|>{"name": "get_weather", "parameters": {"city": "Zürich"}}; {"name": "get_time", "parameters": {"timezone": "Europe/Zurich"}})",
         std::nullopt,
         {{"get_weather", R"({"city": "Zürich"})"}, {"get_time", R"({"timezone": "Europe/Zurich"})"}}},
        {"Let me look that up.\n<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"timezone\": \"Asia/Tokyo\"}}",
         "Let me look that up.",
         {{"get_time", R"({"timezone": "Asia/Tokyo"})"}}}}},
      {"qwen2.5.jinja", "", "<|im_end|>", ToolParser::hermes,
       {{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         std::nullopt,
         {{"get_weather", R"({"city": "Paris"})"}}},
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"fahrenheit\"}}\n"
         "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Rome\"}}\n"
         "</tool_call>",
         std::nullopt,
         {{"get_weather", R"({"city": "Rome", "unit": "fahrenheit"})"}, {"get_time", R"({"timezone": "Europe/Rome"})"}}},
        {"I'll check both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
         "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bergen \\\"west\\\"\"}}\n"
         "</tool_call>",
         "I'll check both cities.",
         {{"get_weather", R"({"city": "Oslo"})"}, {"get_weather", R"({"city": "Bergen \"west\""})"}}}}},
      {"mistral-v0.3.jinja", "<s>", "</s>", ToolParser::mistral,
       {{R"([{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}])",
         std::nullopt,
         {{"get_weather", R"({"city": "Paris", "unit": "celsius"})"}}},
        {R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lyon"}}, {"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}])",
         std::nullopt,
         {{"get_weather", R"({"city": "Lyon"})"}, {"get_time", R"({"timezone": "Europe/Paris"})"}}},
        {R"(Checking the time. [TOOL_CALLS] [{"name": "get_time", "arguments": {"timezone": "America/New_York"}}])",
         "Checking the time.",
         {{"get_time", R"({"timezone": "America/New_York"})"}}}}},
  };
}

ToolOutputFormat family_format(ToolParser parser) {
  ToolOutputFormat format;
  format.parser = parser;
  return format;
}

ojson tool_schema(const std::string& name) {
  for (const auto& tool : ojson::parse(test::kToolsJson)) {
    if (tool["function"]["name"] == name) return tool["function"]["parameters"];
  }
  return nullptr;
}

// A chat body through parse_openai_request, as the server reads it, with
// the family's parser as the model's.
ChatInput parsed_chat(const ojson& body, ToolParser parser) {
  FakeBackendOptions options;
  options.tool_parser = parser;
  FakeBackend backend(options);
  const OpenAiRequest request = parse_openai_request(OpenAiEndpoint::chat, body.dump(), backend);
  REQUIRE(request.request.chat);
  return *request.request.chat;
}

ChatTemplate family_template(const Family& f) {
  return ChatTemplate::from_jinja(read(kTemplates + f.file), {f.bos, f.eos, "", ""}, f.file);
}

ojson jinja_variables(const Family& f, const ojson& messages, const ojson& tools) {
  ojson v = {{"messages", messages}, {"tools", tools}, {"documents", nullptr}, {"add_generation_prompt", true}};
  if (!f.bos.empty()) v["bos_token"] = f.bos;
  v["eos_token"] = f.eos;
  return v;
}

}  // namespace

TEST_CASE("Each family's template names its tool-call format and renders a request's tools as jinja2 does",
          "[tool_calls][chat_template]") {
  if (!test::have_venv()) LLMK_SKIP("no .venv with jinja2 (scripts/setup.sh makes it)");
  const ojson messages = ojson::parse(R"([{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Weather in Paris, and the time there?"}])");
  const ojson tools = ojson::parse(test::kToolsJson);
  ojson cases = ojson::array();
  for (const Family& f : families())
    cases.push_back({{"template", kTemplates + f.file}, {"variables", jinja_variables(f, messages, tools)}});
  const ojson reference = test::jinja_reference(cases);
  const auto all = families();
  REQUIRE(reference.size() == all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const Family& f = all[i];
    INFO(f.file << "\njinja2: " << reference[i].dump());
    CHECK(detect_tool_parser(read(kTemplates + f.file)) == f.parser);
    CHECK(detect_tool_parser(family_template(f)) == f.parser);
    const ChatInput chat = parsed_chat({{"messages", messages}, {"tools", tools}}, f.parser);
    REQUIRE(reference[i].contains("text"));
    const std::string text = family_template(f).render(chat.messages, chat.options);
    CHECK(text == reference[i]["text"].get<std::string>());
    CHECK_THAT(text, Catch::Contains("get_time"));
  }
  // Templates that write no calls name none, by their source and by what
  // they render; a Llama 3 header with "parameters" is Llama's JSON format
  // even without <|python_tag|>.
  for (const char* other : {"chatml.jinja", "llama2.jinja", "llama3.jinja", "gemma.jinja", "mistral-v0.1.jinja"}) {
    INFO(other);
    CHECK(detect_tool_parser(read(kTemplates + other)) == ToolParser::none);
    CHECK(detect_tool_parser(ChatTemplate::from_jinja(read(kTemplates + other), {"<s>", "</s>", "", ""}, other)) ==
          ToolParser::none);
  }
  CHECK(detect_tool_parser(ChatTemplate::by_name("chatml")) == ToolParser::none);
  CHECK(detect_tool_parser("<|start_header_id|>{{ '\"parameters\": ' }}") == ToolParser::llama3_json);
}

TEST_CASE("Each family's outputs parse into the calls they hold, with arguments valid for the tool",
          "[tool_calls]") {
  json schema_cases = json::array();
  for (const Family& f : families()) {
    for (const Output& out : f.outputs) {
      INFO(f.file << "\noutput: " << out.text);
      const ParsedToolOutput parsed = parse_tool_output(family_format(f.parser), out.text);
      CHECK(parsed.content == out.content);
      REQUIRE(parsed.calls.size() == out.calls.size());
      std::set<std::string> ids;
      for (size_t i = 0; i < out.calls.size(); ++i) {
        const ToolCall& call = parsed.calls[i];
        CHECK(call.name == out.calls[i].name);
        CHECK(call.arguments == out.calls[i].arguments);
        const json args = json::parse(call.arguments);
        CHECK(args == json::parse(out.calls[i].arguments));
        schema_cases.push_back({{"schema", tool_schema(call.name)}, {"instance", args}});
        // Mistral's template takes ids of 9 alphanumerics; the others get OpenAI's call_ ids.
        const std::string alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        if (f.parser == ToolParser::mistral) {
          CHECK(call.id.size() == 9);
          CHECK(call.id.find_first_not_of(alnum) == std::string::npos);
        } else {
          CHECK(call.id.rfind("call_", 0) == 0);
          CHECK(call.id.size() == 29);
          CHECK(call.id.substr(5).find_first_not_of(alnum) == std::string::npos);
        }
        ids.insert(call.id);
      }
      CHECK(ids.size() == out.calls.size());
    }
  }
  // Every call's arguments against its tool's parameters: jsonschema when
  // the venv has it, else the hand check of these schemas.
  const auto verdicts = test::jsonschema_verdicts(schema_cases);
  if (verdicts) {
    REQUIRE(verdicts->size() == schema_cases.size());
    for (size_t i = 0; i < schema_cases.size(); ++i) {
      INFO(schema_cases[i].dump());
      CHECK((*verdicts)[i]);
    }
  } else {
    WARN("jsonschema is not in the venv: arguments checked by hand against the test's schemas");
  }
  for (const auto& c : schema_cases) {
    INFO(c.dump());
    CHECK(test::matches_tool_schema(c["schema"], c["instance"]));
  }
  // The checks can fail: an argument outside its enum, or a missing required one.
  CHECK_FALSE(test::matches_tool_schema(tool_schema("get_weather"), {{"city", "Paris"}, {"unit", "kelvin"}}));
  CHECK_FALSE(test::matches_tool_schema(tool_schema("get_time"), json::object()));
}

TEST_CASE("Each family's parsed calls, fed back with their results, render as jinja2 renders them",
          "[tool_calls][chat_template]") {
  if (!test::have_venv()) LLMK_SKIP("no .venv with jinja2 (scripts/setup.sh makes it)");
  const ojson tools = ojson::parse(test::kToolsJson);
  struct Run {
    const Family* family;
    ojson body;  // what a client sends back: arguments as JSON strings
  };
  const auto all = families();
  std::vector<Run> runs;
  ojson cases = ojson::array();
  for (const Family& f : all) {
    for (const Output& out : f.outputs) {
      const ParsedToolOutput parsed = parse_tool_output(family_format(f.parser), out.text);
      ojson calls = ojson::array(), as_template_sees = ojson::array();
      ojson messages = ojson::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "Weather in Paris, and the time there?"}}});
      ojson assistant = {{"role", "assistant"},
                         {"content", parsed.content ? ojson(*parsed.content) : ojson(nullptr)}};
      for (const ToolCall& c : parsed.calls) {
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        as_template_sees.push_back({{"id", c.id},
                                    {"type", "function"},
                                    {"function", {{"name", c.name}, {"arguments", ojson::parse(c.arguments)}}}});
      }
      ojson sent = messages, seen = messages;
      assistant["tool_calls"] = calls;
      sent.push_back(assistant);
      assistant["tool_calls"] = as_template_sees;
      seen.push_back(assistant);
      for (const ToolCall& c : parsed.calls) {
        const ojson result = {{"role", "tool"}, {"tool_call_id", c.id}, {"name", c.name},
                              {"content", "{\"ok\": true, \"for\": \"" + c.name + "\"}"}};
        sent.push_back(result);
        seen.push_back(result);
      }
      // Templates get tool_calls' arguments as objects, as vLLM passes them.
      cases.push_back({{"template", kTemplates + f.file}, {"variables", jinja_variables(f, seen, tools)}});
      runs.push_back({&f, {{"messages", sent}, {"tools", tools}}});
    }
  }
  const ojson reference = test::jinja_reference(cases);
  REQUIRE(reference.size() == runs.size());
  size_t num_rendered = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Family& f = *runs[i].family;
    INFO(f.file << "\nbody: " << runs[i].body.dump() << "\njinja2: " << reference[i].dump());
    const ChatInput chat = parsed_chat(runs[i].body, f.parser);
    const ChatTemplate tmpl = family_template(f);
    if (reference[i].contains("text")) {
      const std::string text = tmpl.render(chat.messages, chat.options);
      CHECK(text == reference[i]["text"].get<std::string>());
      ++num_rendered;
    } else {
      // Llama 3.1's template takes one call per message and raises otherwise.
      REQUIRE(reference[i].contains("raised"));
      try {
        tmpl.render(chat.messages, chat.options);
        FAIL("rendered where jinja2 raised");
      } catch (const Error& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains(reference[i]["raised"].get<std::string>()));
      }
    }
  }
  CHECK(num_rendered >= runs.size() - 1);
}

TEST_CASE("Streamed in any two pieces or byte by byte, each family's output reassembles into the whole one",
          "[tool_calls][stream]") {
  for (const Family& f : families()) {
    const ToolOutputFormat format = family_format(f.parser);
    for (const Output& out : f.outputs) {
      INFO(f.file << "\noutput: " << out.text);
      const ParsedToolOutput whole = parse_tool_output(format, out.text, test::counting_ids(f.parser));
      std::vector<std::vector<size_t>> splits;
      for (size_t k = 1; k < out.text.size(); ++k) splits.push_back({k});
      std::vector<size_t> bytes;
      for (size_t k = 1; k < out.text.size(); ++k) bytes.push_back(k);
      splits.push_back(bytes);
      for (const auto& cuts : splits) {
        INFO("cut at " << cuts.front() << (cuts.size() > 1 ? " (byte by byte)" : ""));
        const test::Reassembled got = test::feed_in_pieces(format, out.text, cuts);
        CHECK_FALSE(got.malformed);
        CHECK(got.content == whole.content.value_or(""));
        REQUIRE(got.calls.size() == whole.calls.size());
        for (size_t i = 0; i < got.calls.size(); ++i) {
          CHECK(got.calls[i].id == whole.calls[i].id);
          CHECK(got.calls[i].name == whole.calls[i].name);
          CHECK(got.calls[i].arguments == whole.calls[i].arguments);
        }
      }
    }
  }
}
