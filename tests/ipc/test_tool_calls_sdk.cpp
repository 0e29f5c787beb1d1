// The openai SDK against llmk's HTTP API with tools, over a backend that
// answers each prompt with a scripted output in a family's format, cut into
// events: the non-streaming message, the chunks joined by hand and the
// SDK's own stream accumulator all give the same content and calls, as the
// output holds them.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "ipc/server.hpp"
#include "support.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"
#include "tool_calls_support.hpp"

using namespace llmk;
using namespace llmk::ipc;
using nlohmann::json;

namespace {

// Answers a chat with the script for its last message's content, `piece`
// bytes per event, from its own thread.
class ScriptedBackend : public Backend {
 public:
  ScriptedBackend(ToolParser parser, std::map<std::string, std::string> scripts, size_t piece)
      : parser_(parser), scripts_(std::move(scripts)), piece_(piece) {}
  ~ScriptedBackend() override {
    std::lock_guard lock(mutex_);
    for (auto& t : threads_) t.join();
  }
  void submit(Request request, EventCallback on_event) override {
    const std::string prompt = request.chat ? request.chat->messages.back().content : request.prompt;
    const std::string text = scripts_.count(prompt) ? scripts_.at(prompt) : "no script";
    std::lock_guard lock(mutex_);
    threads_.emplace_back([id = request.id, text, piece = piece_, on_event = std::move(on_event)] {
      for (size_t at = 0; at < text.size(); at += piece) {
        RequestEvent ev;
        ev.request_id = id;
        ev.text_delta = text.substr(at, piece);
        ev.token_ids = {1};
        ev.finished = at + piece >= text.size();
        ev.request_done = ev.finished;
        if (ev.finished) {
          ev.finish_reason = FinishReason::stop;
          ev.usage.prompt_tokens = 3;
          ev.usage.completion_tokens = static_cast<int32_t>((text.size() + piece - 1) / piece);
        }
        on_event(ev);
      }
    });
  }
  bool cancel(const std::string&) override { return false; }
  EngineStats stats() const override { return {}; }
  uint32_t flush_cache() override { return 0; }
  ModelInfo model_info() const override {
    ModelInfo info;
    info.name = "scripted";
    info.max_context = 4096;
    info.vocab_size = 256;
    info.chat_template = "scripted";
    info.tool_parser = parser_;
    return info;
  }
  std::string token_text(int32_t) const override { return ""; }

 private:
  const ToolParser parser_;
  const std::map<std::string, std::string> scripts_;
  const size_t piece_;
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

}  // namespace

TEST_CASE("The openai SDK reads tool calls from llmk's chat completions, streamed and not, as the output holds them",
          "[tool_calls][python]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with the openai package (scripts/setup.sh makes it)");
  struct Script {
    ToolParser parser;
    std::string prompt;
    std::string output;
    json content;  // null: none
    json calls;    // [[name, arguments]]
  };
  const std::vector<Script> scripts = {
      {ToolParser::hermes, "two calls",
       "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n</tool_call>",
       "Checking.", json::array({{"get_weather", "{\"city\": \"Paris\"}"}, {"get_time", "{\"timezone\": \"Europe/Paris\"}"}})},
      {ToolParser::hermes, "text", "Paris is sunny <b>today</b>.", "Paris is sunny <b>today</b>.", json::array()},
      {ToolParser::mistral, "mistral",
       "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\", \"unit\": \"celsius\"}}]", nullptr,
       json::array({{"get_weather", "{\"city\": \"Lyon\", \"unit\": \"celsius\"}"}})},
      {ToolParser::llama3_json, "llama",
       "{\"name\": \"get_time\", \"parameters\": {\"timezone\": \"UTC\"}}; {\"name\": \"get_weather\", "
       "\"parameters\": {\"city\": \"Oslo\"}}",
       nullptr, json::array({{"get_time", "{\"timezone\": \"UTC\"}"}, {"get_weather", "{\"city\": \"Oslo\"}"}})},
  };
  for (ToolParser parser : {ToolParser::hermes, ToolParser::mistral, ToolParser::llama3_json}) {
    std::map<std::string, std::string> by_prompt;
    json prompts = json::array();
    for (const Script& s : scripts) {
      if (s.parser != parser) continue;
      by_prompt[s.prompt] = s.output;
      prompts.push_back(s.prompt);
    }
    // 5 bytes per event: markers and names are cut across events.
    ScriptedBackend backend(parser, by_prompt, 5);
    Server server(backend, {.http = "127.0.0.1:0", .zmq = ""});
    const json job = {{"tools", json::parse(test::kToolsJson)}, {"prompts", prompts}};
    const auto dir = std::filesystem::temp_directory_path();
    const auto in = dir / ("llmk_tools_sdk_" + std::to_string(::getpid()) + ".json");
    std::ofstream(in) << job.dump();
    const auto r = test::run_command("NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 " + test::venv_python() + " " +
                                     LLMK_SOURCE_DIR "/tests/ipc/openai_tools_client.py " +
                                     std::to_string(server.http()->port()) + " scripted < " + in.string());
    std::filesystem::remove(in);
    INFO(std::string(tool_parser_name(parser)) << "\n" << r.out);
    REQUIRE(r.status == 0);
    const json out = json::parse(r.out);
    size_t i = 0;
    for (const Script& s : scripts) {
      if (s.parser != parser) continue;
      INFO("prompt " << s.prompt);
      const json& run = out["runs"][i++];
      for (const char* way : {"whole", "streamed", "accumulated"}) {
        INFO(way << ": " << run[way].dump());
        const json& m = run[way];
        CHECK(m["content"] == s.content);
        CHECK(m["finish_reason"] == (s.calls.empty() ? "stop" : "tool_calls"));
        REQUIRE(m["tool_calls"].size() == s.calls.size());
        for (size_t k = 0; k < s.calls.size(); ++k) {
          CHECK(m["tool_calls"][k]["type"] == "function");
          CHECK(m["tool_calls"][k]["name"] == s.calls[k][0]);
          CHECK(m["tool_calls"][k]["arguments"] == s.calls[k][1]);
          const std::string id = m["tool_calls"][k]["id"];
          CHECK(id.size() == (parser == ToolParser::mistral ? 9u : 29u));
        }
      }
      // The stream's ids are the ones the accumulator kept.
      CHECK(run["streamed"]["tool_calls"] == run["accumulated"]["tool_calls"]);
    }
  }
}
