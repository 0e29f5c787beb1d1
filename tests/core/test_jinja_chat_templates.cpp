// Acceptance: the published chat templates of Llama 3.1, Llama 3, Llama 2,
// Mistral v0.1 and v0.3, Qwen2.5, ChatML and Gemma (tests/data/
// chat_templates/), rendered through ChatTemplate over conversations with
// system, user, assistant and tool turns, with and without tools, are
// byte-identical to PyPI's jinja2 rendering them in transformers'
// environment, and fail with the same raise_exception message where jinja2
// raises.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/chat_template.hpp"
#include "core/error.hpp"
#include "core/tokenizer.hpp"
#include "jinja_reference.hpp"
#include "support/skip.hpp"

using llmk::ChatMessage;
using llmk::ChatTemplate;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kTemplates = std::string(LLMK_SOURCE_DIR) + "/tests/data/chat_templates/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Conversations in OpenAI's shape (what the HTTP API receives).
const char* const kConversations[] = {
    // system, user, assistant, user; quotes, newlines, padding, emoji
    R"([{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! \"quoted\" it's\n  multi-line  "},
        {"role": "assistant", "content": "  Hi there 😀 "},
        {"role": "user", "content": "What is 2+2?"}])",
    // no system message
    R"([{"role": "user", "content": "Bonjour, ça va ?"},
        {"role": "assistant", "content": "Oui."},
        {"role": "user", "content": "Et toi\t?"}])",
    // a tool round trip: a call (null content), its result, the answer
    R"([{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123def", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}", "tool_call_id": "abc123def",
         "name": "get_weather"},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
        {"role": "user", "content": "Thanks"}])",
    // two parallel tool calls and two results
    R"([{"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
          {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
          {"id": "call00002", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "18", "tool_call_id": "call00001"},
        {"role": "tool", "content": "25", "tool_call_id": "call00002"}])",
    // roles out of order (templates that check raise)
    R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])",
};

const char* const kTools = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Get the current weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}])";

struct Family {
  const char* file;
  const char* bos;
  const char* eos;
};

const Family kFamilies[] = {
    {"llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>"},
    {"llama3.jinja", "<|begin_of_text|>", "<|eot_id|>"},
    {"llama2.jinja", "<s>", "</s>"},
    {"mistral-v0.1.jinja", "<s>", "</s>"},
    {"mistral-v0.3.jinja", "<s>", "</s>"},
    {"qwen2.5.jinja", "", "<|im_end|>"},
    {"chatml.jinja", "<s>", "</s>"},
    {"gemma.jinja", "<bos>", "<eos>"},
};

std::vector<ChatMessage> to_messages(const ojson& list) {
  std::vector<ChatMessage> out;
  for (const auto& m : list) {
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (m["content"].is_null()) msg.null_content = true;
    else msg.content = m["content"].get<std::string>();
    if (m.contains("tool_calls")) msg.tool_calls = llmk::jinja::Value::from_json(m["tool_calls"]);
    if (m.contains("tool_call_id")) msg.tool_call_id = m["tool_call_id"].get<std::string>();
    if (m.contains("name")) msg.name = m["name"].get<std::string>();
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

TEST_CASE("Each family's published chat template renders byte-identically to jinja2", "[jinja][chat_template]") {
  if (!llmk::test::have_venv()) LLMK_SKIP("no .venv with jinja2 (scripts/setup.sh makes it)");
  struct Run {
    const Family* family;
    ojson messages;
    bool tools;
    bool add_generation_prompt;
    ojson variables;
  };
  std::vector<Run> runs;
  ojson cases = ojson::array();
  for (const Family& family : kFamilies) {
    for (const char* conversation : kConversations) {
      for (bool tools : {false, true}) {
        for (bool generation_prompt : {true, false}) {
          Run run{&family, ojson::parse(conversation), tools, generation_prompt, {}};
          // As transformers calls render(): tools is None without tools.
          run.variables = {{"messages", run.messages},
                           {"tools", tools ? ojson::parse(kTools) : ojson(nullptr)},
                           {"documents", nullptr},
                           {"add_generation_prompt", generation_prompt}};
          if (*family.bos) run.variables["bos_token"] = family.bos;
          run.variables["eos_token"] = family.eos;
          cases.push_back({{"template", kTemplates + family.file}, {"variables", run.variables}});
          runs.push_back(std::move(run));
        }
      }
    }
  }
  const ojson reference = llmk::test::jinja_reference(cases);
  REQUIRE(reference.size() == runs.size());
  size_t num_rendered = 0;
  size_t num_raised = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& run = runs[i];
    const auto chat = ChatTemplate::from_jinja(read(kTemplates + run.family->file),
                                               {run.family->bos, run.family->eos, "", ""}, run.family->file);
    llmk::ChatRenderOptions options;
    if (run.tools) options.tools = llmk::jinja::Value::from_json(ojson::parse(kTools));
    options.add_generation_prompt = run.add_generation_prompt;
    const auto messages = to_messages(run.messages);
    INFO(run.family->file << " case " << i << " tools=" << run.tools << "\nmessages: " << run.messages.dump()
                          << "\njinja2: " << reference[i].dump());
    if (reference[i].contains("text")) {
      CHECK(chat.render(messages, options) == reference[i]["text"].get<std::string>());
      ++num_rendered;
    } else if (reference[i].contains("raised")) {
      try {
        chat.render(messages, options);
        FAIL("rendered where jinja2 raised");
      } catch (const llmk::Error& e) {
        CHECK(e.code() == llmk::ErrorCode::invalid_argument);
        CHECK_THAT(std::string(e.what()), Catch::Contains("raised an exception: " + reference[i]["raised"].get<std::string>()));
      }
      ++num_raised;
    } else {
      CHECK_THROWS_AS(chat.render(messages, options), llmk::Error);
    }
  }
  // The conversations exercise both outcomes in every family that checks roles.
  CHECK(num_rendered > runs.size() / 2);
  CHECK(num_raised > 0);
}

TEST_CASE("Llama 3.1's date_string and tools_in_user_message reach the template as jinja2 sees them",
          "[jinja][chat_template]") {
  if (!llmk::test::have_venv()) LLMK_SKIP("no .venv with jinja2 (scripts/setup.sh makes it)");
  // Without date_string the template's default applies; the reference is
  // rendered with the same (absent) variable.
  const auto chat = ChatTemplate::from_jinja(read(kTemplates + "llama3.1.jinja"), {"<|begin_of_text|>", "<|eot_id|>", "", ""},
                                             "llama3.1");
  const ojson messages = ojson::parse(kConversations[0]);
  const ojson cases = ojson::array({{{"template", kTemplates + "llama3.1.jinja"},
                                     {"variables", {{"messages", messages}, {"tools", nullptr},
                                                    {"add_generation_prompt", true},
                                                    {"bos_token", "<|begin_of_text|>"}}}}});
  const ojson reference = llmk::test::jinja_reference(cases);
  REQUIRE(reference.size() == 1);
  const std::string text = chat.render(to_messages(messages), {});
  CHECK(text == reference[0]["text"].get<std::string>());
  CHECK_THAT(text, Catch::Contains("Today Date: 26 Jul 2024"));
}

TEST_CASE("A rendered Llama 2 prompt encodes to Meta's reference ids, special tokens as ids",
          "[jinja][chat_template]") {
  llmk::Tokenizer tokenizer(std::string(LLMK_SHARED_DIR) + "/models/llama2-tokenizer/tokenizer.model");
  const auto chat = ChatTemplate::from_jinja(read(kTemplates + "llama2.jinja"), {"<s>", "</s>", "", ""}, "llama2");
  // Meta's chat_completion: BOS + encode("[INST] Hi [/INST]").
  CHECK(chat.encode(std::vector<ChatMessage>{{"user", "Hi"}}, tokenizer) ==
        std::vector<int32_t>{1, 518, 25580, 29962, 6324, 518, 29914, 25580, 29962});
  // A past exchange ends in EOS and the next turn starts with BOS, as ids,
  // exactly as the built-in llama-2 template encodes it.
  const std::vector<ChatMessage> messages = {{"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}};
  CHECK(chat.encode(messages, tokenizer) == ChatTemplate::by_name("llama-2").encode(messages, tokenizer));
  CHECK(chat.render(messages) == ChatTemplate::by_name("llama-2").render(messages));
  // Special-token text becomes its id, as Hugging Face's Llama 2 tokenizer
  // encodes it; the text between stays text.
  const auto ids = tokenizer.encode_with_special_tokens("<s>x</s><unk>", false);
  REQUIRE(ids.size() >= 4);
  CHECK(ids.front() == 1);
  CHECK(std::count(ids.begin(), ids.end(), 2) == 1);
  CHECK(ids.back() == 0);
}
