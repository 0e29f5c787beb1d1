// A GGUF's own chat template (tokenizer.chat_template and the named
// tokenizer.chat_template.tool_use) renders chat requests exactly as jinja2
// renders it, with the special tokens of the file's vocabulary.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/chat_template.hpp"
#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_test_support.hpp"
#include "core/jinja_reference.hpp"
#include "core/safetensors_writer.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

const char* const kTools = R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])";

// jinja2's rendering of the file's template `key` over `messages`, with the
// special tokens tests/gguf_write_models.py's "chat" vocabulary gives ids
// 1 (BOS), 2 (EOS), 0 (unknown) and 3 (padding).
std::string reference(const fs::path& file, const std::string& key, const std::vector<ChatMessage>& messages,
                      bool with_tools) {
  const GgufFile f(file);
  REQUIRE(f.find(key) != nullptr);
  ojson list = ojson::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  const ojson cases = ojson::array({{{"source", f.find(key)->string},
                                     {"variables",
                                      {{"messages", list},
                                       {"tools", with_tools ? ojson::parse(kTools) : ojson(nullptr)},
                                       {"add_generation_prompt", true},
                                       {"bos_token", "<|im_start|>"},
                                       {"eos_token", "<|im_end|>"},
                                       {"unk_token", "<unk>"},
                                       {"pad_token", "<pad>"}}}}});
  const ojson out = jinja_reference(cases);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].contains("text"));
  return out[0]["text"].get<std::string>();
}

}  // namespace

TEST_CASE("a GGUF's chat template renders requests as jinja2 does, with the file's special tokens",
          "[gguf][chat_template]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  const fs::path file = dir.path() / "chat.gguf";
  REQUIRE(run_gguf_writer("chat " + file.string() + " 1"));
  const ChatTemplate t = resolve_chat_template("", file);
  CHECK(t.kind() == ChatTemplate::Kind::jinja);
  const std::vector<ChatMessage> messages = {
      {"system", "Be brief. "}, {"user", "hi"}, {"assistant", "hello"}, {"user", " a b "}};
  const std::string want = reference(file, "tokenizer.chat_template", messages, false);
  CHECK_THAT(want, Contains("<|im_start|><|im_start|>system") && Contains("[<unk>|<pad>]"));
  CHECK(t.render(messages) == want);

  // A request with tools gets the named tool_use template.
  ChatRenderOptions with_tools;
  with_tools.tools = jinja::Value::from_json(ojson::parse(kTools));
  const std::string want_tools = reference(file, "tokenizer.chat_template.tool_use", messages, true);
  CHECK_THAT(want_tools, Contains("TOOLS 1"));
  CHECK(t.render(messages, with_tools) == want_tools);
}

TEST_CASE("a GGUF without a tool_use template renders tool requests with its default template",
          "[gguf][chat_template]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  const fs::path file = dir.path() / "chat.gguf";
  REQUIRE(run_gguf_writer("chat " + file.string() + " 0"));
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  ChatRenderOptions with_tools;
  with_tools.tools = jinja::Value::from_json(ojson::parse(kTools));
  CHECK(resolve_chat_template("", file).render(messages, with_tools) ==
        reference(file, "tokenizer.chat_template", messages, true));
  // A configured template file wins, and still sees the file's tokens.
  const fs::path custom = dir.path() / "custom.jinja";
  write_file(custom, "{{ bos_token }}|{{ eos_token }}|{{ messages[0]['content'] }}");
  CHECK(resolve_chat_template(custom.string(), file).render(messages) == "<|im_start|>|<|im_end|>|hi");
}

TEST_CASE("a GGUF without a chat template says so, naming the file and the key", "[gguf][chat_template][errors]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  const fs::path file = dir.path() / "tiny.gguf";
  REQUIRE(run_gguf_writer("tiny " + file.string() + " llama"));
  try {
    resolve_chat_template("", file);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unsupported);
    CHECK_THAT(e.what(), Contains(file.string() + " has no tokenizer.chat_template"));
  }
  CHECK(resolve_chat_template("chatml", file).kind() == ChatTemplate::Kind::chatml);
}
