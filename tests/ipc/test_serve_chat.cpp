// `llmk serve` with each model family's own chat template (--chat-template):
// /v1/chat/completions must feed the engine exactly what PyPI's jinja2
// renders from that template, tokenized with its special tokens, and answer
// with what the same prompt ids give on /v1/completions.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>

#include "core/jinja_reference.hpp"
#include "core/tokenizer.hpp"
#include "serve_process.hpp"
#include "support.hpp"
#include "support/skip.hpp"

using namespace llmk;
using llmk::test::curl;
using llmk::test::ServeProcess;
using nlohmann::json;

TEST_CASE("llmk serve answers chat completions with each family's own template, as jinja2 renders it",
          "[serve][chat]") {
  if (!test::have_venv()) LLMK_SKIP("no .venv with jinja2 (scripts/setup.sh makes it)");
  const std::string dir = LLMK_SOURCE_DIR "/tests/data/chat_templates/";
  const std::vector<std::string> families = {"llama2",          "llama3",          "llama3.1", "mistral-v0.1",
                                             "mistral-v0.3",    "qwen2.5",         "chatml",   "gemma"};
  // Alternating turns: the form every one of these templates accepts.
  const json messages = json::array({{{"role", "user"}, {"content", "Tell me a story."}},
                                     {{"role", "assistant"}, {"content", "Once upon a time"}},
                                     {{"role", "user"}, {"content", "What happened next?"}}});
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const auto& family : families) {
    cases.push_back({{"template", dir + family + ".jinja"},
                     {"variables",
                      {{"messages", messages}, {"add_generation_prompt", true}, {"bos_token", "<s>"},
                       {"eos_token", "</s>"}}}});
  }
  const auto rendered = test::jinja_reference(cases);
  REQUIRE(rendered.size() == families.size());
  const Tokenizer tokenizer(LLMK_SHARED_DIR "/models/stories260K/tokenizer.model");

  for (size_t i = 0; i < families.size(); ++i) {
    const std::string& family = families[i];
    INFO(family);
    REQUIRE(rendered[i].contains("text"));
    // The template writes its own BOS; nothing is added.
    const std::vector<int32_t> ids =
        tokenizer.encode_with_special_tokens(rendered[i]["text"].get<std::string>(), false);

    ServeProcess serve({"--chat-template", dir + family + ".jinja"});
    REQUIRE(serve.wait_ready());
    INFO(serve.log());
    const json chat = {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
    const auto answer = curl(serve.http_port(), "POST", "/v1/chat/completions", chat.dump());
    REQUIRE(answer.status == 200);
    const json body = answer.json();
    CHECK(body["usage"]["prompt_tokens"] == ids.size());
    CHECK(body["usage"]["completion_tokens"] == 8);

    const json completion = {{"prompt", ids}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
    const auto same = curl(serve.http_port(), "POST", "/v1/completions", completion.dump());
    REQUIRE(same.status == 200);
    CHECK(body["choices"][0]["message"]["content"] == same.json()["choices"][0]["text"]);
  }
}

#endif  // LLMK_HAVE_ENGINE
