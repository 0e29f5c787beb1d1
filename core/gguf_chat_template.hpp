// The chat template a GGUF file carries, as llama.cpp's converter stores
// tokenizer_config.json's: tokenizer.chat_template is the default template,
// tokenizer.chat_template.<name> a named one (tokenizer.chat_templates lists
// the names); "tool_use" serves requests with tools, as the Hugging Face
// list's entry of that name does. The special-token strings a Jinja
// template sees (bos_token, eos_token, unk_token, pad_token) are the
// vocabulary's texts of tokenizer.ggml.bos_token_id, eos_token_id,
// unknown_token_id and padding_token_id.
#pragma once

#include <string>

#include "core/chat_template.hpp"
#include "core/gguf.hpp"

namespace llmk {

struct GgufChatTemplate {
  std::string source;    // the default template; empty when the file has none
  std::string tool_use;  // tokenizer.chat_template.tool_use; may be empty
  ChatSpecialTokens tokens;
};

// Throws Error(bad_checkpoint) naming the key when a template key is not a
// string or a special id lies outside tokenizer.ggml.tokens.
GgufChatTemplate gguf_chat_template(const GgufFile& file);

}  // namespace llmk
