#include "core/gguf_chat_template.hpp"

#include <utility>

#include "core/gguf_metadata.hpp"

namespace llmk {

using namespace gguf_meta;

GgufChatTemplate gguf_chat_template(const GgufFile& f) {
  GgufChatTemplate t;
  t.source = get_string(f, "tokenizer.chat_template").value_or("");
  t.tool_use = get_string(f, "tokenizer.chat_template.tool_use").value_or("");
  if (t.source.empty()) std::swap(t.source, t.tool_use);  // only a tool_use template: it serves every request
  const auto tokens = get_string_array(f, "tokenizer.ggml.tokens");
  const auto token_text = [&](const std::string& key) -> std::string {
    if (!f.find(key) || !tokens) return "";
    const int32_t id = get_int(f, key, std::nullopt, 0);
    if (static_cast<size_t>(id) >= tokens->size())
      fail_key(f, key, "= " + std::to_string(id) + " is outside tokenizer.ggml.tokens (" +
                           std::to_string(tokens->size()) + " tokens)");
    return (*tokens)[static_cast<size_t>(id)];
  };
  t.tokens = {token_text("tokenizer.ggml.bos_token_id"), token_text("tokenizer.ggml.eos_token_id"),
              token_text("tokenizer.ggml.unknown_token_id"), token_text("tokenizer.ggml.padding_token_id")};
  return t;
}

}  // namespace llmk
