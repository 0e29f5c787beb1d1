// Chat templates: exact renderings, token ids, detection, role checks.
#include <catch2/catch.hpp>

#include <fstream>

#include "core/chat_template.hpp"
#include "core/error.hpp"
#include "core/tokenizer.hpp"

using llmk::ChatMessage;
using llmk::ChatTemplate;

namespace {

const std::string kShared = LLMK_SHARED_DIR;
const std::string kLlamaModel = kShared + "/models/llama2-tokenizer/tokenizer.model";

llmk::ErrorCode error_code_of(auto&& call) {
  try {
    call();
  } catch (const llmk::Error& e) {
    return e.code();
  }
  FAIL("no llmk::Error thrown");
  return llmk::ErrorCode::internal;
}

// A temporary model directory holding one tokenizer_config.json.
std::filesystem::path model_dir_with(const std::string& name, const std::string& tokenizer_config) {
  const auto dir = std::filesystem::temp_directory_path() / ("llmk_chat_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << tokenizer_config;
  return dir;
}

}  // namespace

TEST_CASE("llama-2 folds the system message into the first user turn", "[chat_template]") {
  const std::vector<ChatMessage> messages = {{"system", "You are helpful."}, {"user", "  Hi there\n"}};
  // As in Meta's code and the HF template, the strip applies to the combined
  // content: the user text's leading spaces stay, its trailing newline goes.
  CHECK(ChatTemplate::by_name("llama-2").render(messages) ==
        "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\n  Hi there [/INST]");
}

TEST_CASE("llama-2 wraps each past exchange in BOS and EOS", "[chat_template]") {
  const std::vector<ChatMessage> messages = {
      {"user", "What is 2+2?"}, {"assistant", " 4. "}, {"user", "And 3+3?"}};
  CHECK(ChatTemplate::by_name("llama2").render(messages) ==
        "<s>[INST] What is 2+2? [/INST] 4. </s><s>[INST] And 3+3? [/INST]");
}

TEST_CASE("llama-2 token ids have BOS and EOS as ids, as Meta's reference encodes turns", "[chat_template]") {
  llmk::Tokenizer tokenizer(kLlamaModel);
  const auto chat = ChatTemplate::by_name("llama-2");
  // Meta's chat_completion: encode("[INST] Hi [/INST]") with BOS.
  CHECK(chat.encode(std::vector<ChatMessage>{{"user", "Hi"}}, tokenizer) ==
        std::vector<int32_t>{1, 518, 25580, 29962, 6324, 518, 29914, 25580, 29962});
  const std::vector<ChatMessage> messages = {{"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}};
  std::vector<int32_t> expected = {1};
  for (int32_t id : tokenizer.encode("[INST] u1 [/INST] a1 ", false)) expected.push_back(id);
  expected.push_back(2);
  expected.push_back(1);
  for (int32_t id : tokenizer.encode("[INST] u2 [/INST]", false)) expected.push_back(id);
  CHECK(chat.encode(messages, tokenizer) == expected);
}

TEST_CASE("chatml renders every message and opens the assistant turn", "[chat_template]") {
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hello"}};
  const auto chat = ChatTemplate::by_name("chatml");
  CHECK(chat.render(messages) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  llmk::Tokenizer tokenizer(kLlamaModel);
  const auto with_bos = chat.encode(messages, tokenizer, true);
  const auto without = chat.encode(messages, tokenizer, false);
  REQUIRE(with_bos.size() == without.size() + 1);
  CHECK(with_bos.front() == 1);
  CHECK(tokenizer.decode(without) == chat.render(messages));
}

TEST_CASE("Templates are detected from the Hugging Face chat_template string", "[chat_template]") {
  CHECK(ChatTemplate::detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
            .kind() == ChatTemplate::Kind::chatml);
  CHECK(ChatTemplate::detect("{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}").kind() ==
        ChatTemplate::Kind::llama2);
  CHECK(error_code_of([] { ChatTemplate::detect("{{ '<|user|>\\n' + message['content'] }}"); }) ==
        llmk::ErrorCode::unsupported);
  CHECK(error_code_of([] { ChatTemplate::by_name("vicuna"); }) == llmk::ErrorCode::invalid_argument);
}

TEST_CASE("The configured template wins, else the model's tokenizer_config template is rendered", "[chat_template]") {
  // The model's own Jinja template is rendered (here ChatML's published one,
  // which must agree with the built-in chatml text).
  const auto chatml_dir = model_dir_with(
      "chatml", R"({"bos_token": "<s>", "chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"})");
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hello"}};
  const auto model_template = llmk::resolve_chat_template("", chatml_dir);
  CHECK(model_template.kind() == ChatTemplate::Kind::jinja);
  CHECK_THAT(std::string(model_template.name()), Catch::Contains("tokenizer_config.json"));
  CHECK(model_template.render(messages) == ChatTemplate::by_name("chatml").render(messages));
  CHECK(llmk::resolve_chat_template("llama-2", chatml_dir).kind() == ChatTemplate::Kind::llama2);
  // A list of named templates: "default" for chat, "tool_use" with tools;
  // special tokens come from tokenizer_config (string or AddedToken form).
  const auto list_dir = model_dir_with(
      "list", R"({"bos_token": {"content": "<B>"}, "chat_template": [{"name": "tool_use", "template": "tools:{{ tools | length }}"}, {"name": "default", "template": "{{ bos_token }}[INST]"}]})");
  const auto listed = llmk::resolve_chat_template("", list_dir);
  CHECK(listed.render(messages) == "<B>[INST]");
  llmk::ChatRenderOptions with_tools;
  with_tools.tools = llmk::jinja::Value(llmk::jinja::List{llmk::jinja::Value("t")});
  CHECK(listed.render(messages, with_tools) == "tools:1");
  // A configured file overrides the model's template (--chat-template FILE).
  const auto file = chatml_dir / "override.jinja";
  std::ofstream(file) << "{{ bos_token }}{{ messages[-1].content | upper }}\n";
  CHECK(llmk::resolve_chat_template(file.string(), chatml_dir).render(messages) == "<s>HELLO");
  CHECK(error_code_of([&] { llmk::resolve_chat_template((chatml_dir / "nope.jinja").string(), chatml_dir); }) ==
        llmk::ErrorCode::invalid_config);
  // A template outside the subset is refused at load, naming the file and construct.
  std::ofstream(file) << "{% include 'other.jinja' %}";
  try {
    llmk::resolve_chat_template(file.string(), chatml_dir);
    FAIL("no exception");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::unsupported);
    CHECK_THAT(std::string(e.what()), Catch::Contains("override.jinja") && Catch::Contains("include") &&
                                          Catch::Contains("line 1, column 4"));
  }
  // stories260K declares no chat template: refused, naming the file.
  const auto stories = std::filesystem::path(kShared) / "models/stories260K";
  try {
    llmk::resolve_chat_template("", stories);
    FAIL("no exception");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::unsupported);
    CHECK_THAT(std::string(e.what()), Catch::Contains("tokenizer_config.json") && Catch::Contains("chat_template"));
  }
  const auto missing = std::filesystem::temp_directory_path() / "llmk_chat_no_such_model";
  CHECK(error_code_of([&] { llmk::resolve_chat_template("", missing); }) == llmk::ErrorCode::unsupported);
  std::filesystem::remove_all(chatml_dir);
  std::filesystem::remove_all(list_dir);
}

TEST_CASE("Empty message lists, unknown roles and out-of-order llama-2 turns are invalid", "[chat_template]") {
  const auto llama = ChatTemplate::by_name("llama-2");
  const auto chatml = ChatTemplate::by_name("chatml");
  using Messages = std::vector<ChatMessage>;
  for (const auto& chat : {llama, chatml}) {
    CHECK(error_code_of([&] { chat.render(Messages{}); }) == llmk::ErrorCode::invalid_argument);
    CHECK(error_code_of([&] { chat.render(Messages{{"tool", "x"}}); }) == llmk::ErrorCode::invalid_argument);
  }
  CHECK(error_code_of([&] { llama.render(Messages{{"assistant", "a"}}); }) == llmk::ErrorCode::invalid_argument);
  CHECK(error_code_of([&] { llama.render(Messages{{"user", "a"}, {"user", "b"}}); }) ==
        llmk::ErrorCode::invalid_argument);
  CHECK(error_code_of([&] { llama.render(Messages{{"user", "a"}, {"assistant", "b"}}); }) ==
        llmk::ErrorCode::invalid_argument);
  CHECK(error_code_of([&] { llama.render(Messages{{"system", "s"}}); }) == llmk::ErrorCode::invalid_argument);
  CHECK(error_code_of([&] { llama.render(Messages{{"user", "a"}, {"system", "s"}}); }) ==
        llmk::ErrorCode::invalid_argument);
  CHECK_NOTHROW(chatml.render(Messages{{"user", "a"}, {"assistant", "b"}, {"assistant", "c"}}));
}
