// Chat prompts: OpenAI-style message lists rendered with the model's chat
// template.
//
// The model's template is Jinja (the chat_template of tokenizer_config.json,
// or a file named by model.chat_template / --chat-template), rendered by
// llmk's Jinja subset (core/jinja/, docs/chat_templates.md) exactly as
// transformers' apply_chat_template renders it: messages, tools (none when
// absent), add_generation_prompt, and the special tokens of
// tokenizer_config (bos_token, eos_token, unk_token, pad_token) as
// variables. tokenizer_config may list named templates; "default" is used,
// or "tool_use" when the request has tools and the model has one.
//
// Two built-in templates remain, chosen by name ("llama-2", "chatml") in the
// config, for models without a template of their own:
//
// llama-2 follows Meta's reference chat_completion (and the Hugging Face
// template): an optional leading system message is folded into the first
// user turn as "<<SYS>>\n{system}\n<</SYS>>\n\n{user}"; roles then alternate
// user/assistant and end with user; each past exchange is
//   BOS "[INST] {user} [/INST] {assistant} " EOS
// and the last user turn is BOS "[INST] {user} [/INST]" (contents stripped
// of surrounding whitespace). BOS and EOS are token ids, never text.
//
// chatml: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
// "<|im_start|>assistant\n"; BOS first when the tokenizer adds one. The
// markers become single tokens only if the sentencepiece model defines them
// as user-defined pieces; otherwise they are encoded as plain text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/jinja/value.hpp"

namespace llmk {

namespace jinja {
class Template;
}

class Tokenizer;

// One message in OpenAI's shape. Built-in templates take system, user and
// assistant; a Jinja template sees every field that is set, under OpenAI's
// key names, and decides itself which roles (tool, ipython, ...) it takes.
struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}

  std::string role;  // system | user | assistant | tool | ...
  std::string content;
  bool null_content = false;  // content was null (assistant tool calls): templates see none
  // A list of {"id", "type": "function", "function": {"name", "arguments"}};
  // undefined when the message has none.
  jinja::Value tool_calls;
  std::string tool_call_id;  // tool messages: the call answered ("" = absent)
  std::string name;          // tool messages: the tool's name ("" = absent)
};

// What a request adds to its messages.
struct ChatRenderOptions {
  jinja::Value tools;  // list of tool schemas (OpenAI's "tools"); undefined or none: no tools
  bool add_generation_prompt = true;
};

// A chat request's input (Request::chat).
struct ChatInput {
  std::vector<ChatMessage> messages;
  ChatRenderOptions options;
};

// Special-token strings of tokenizer_config.json, given to Jinja templates.
struct ChatSpecialTokens {
  std::string bos_token;
  std::string eos_token;
  std::string unk_token;
  std::string pad_token;
};

class ChatTemplate {
 public:
  enum class Kind { llama2, chatml, jinja };

  // A built-in template (llama2 or chatml).
  explicit ChatTemplate(Kind kind);
  // A Jinja template: `source` is the default template, `tool_use_source`
  // (may be empty) the one used when a request has tools. `name` describes
  // where it came from (for logs). Throws what jinja::Template throws:
  // Error(unsupported) naming a construct outside the subset and its
  // position, Error(invalid_argument) for malformed syntax.
  static ChatTemplate from_jinja(std::string_view source, ChatSpecialTokens tokens, std::string name,
                                 std::string_view tool_use_source = {});
  // "llama-2" (or "llama2") and "chatml"; Error(invalid_argument) otherwise.
  static ChatTemplate by_name(std::string_view name);
  // Which built-in a Hugging Face Jinja chat_template resembles, by its
  // markers; Error(unsupported) when it is neither form. (Models' own
  // templates are rendered with from_jinja; this only names a fallback.)
  static ChatTemplate detect(std::string_view jinja_template);

  Kind kind() const { return kind_; }
  std::string_view name() const;

  // The prompt as text. Built-ins write llama-2's BOS/EOS as "<s>"/"</s>"
  // (for logs and display; encode() is what the engine feeds the model;
  // chatml's text has no BOS, encode() adds it); a Jinja template's text is
  // exactly what it renders. Throws Error(invalid_argument) for an empty
  // list, for built-ins an unknown role or (llama-2) roles out of order, and
  // for Jinja a template's raise_exception (naming its message) or a
  // rendering error.
  std::string render(std::span<const ChatMessage> messages) const;
  std::string render(std::span<const ChatMessage> messages, const ChatRenderOptions& options) const;
  // The prompt as token ids. add_bos: whether the model wants a BOS first
  // (tokenizer_config's add_bos_token); llama-2 always has one per turn.
  // A Jinja template's text is encoded with
  // Tokenizer::encode_with_special_tokens(), adding
  // nothing (as apply_chat_template(tokenize=True) does: the template
  // writes its own BOS), so add_bos is ignored there.
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, const Tokenizer& tokenizer,
                              bool add_bos = true) const;
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                              const Tokenizer& tokenizer, bool add_bos = true) const;

 private:
  struct Segment {
    enum class Type { text, bos, eos } type;
    std::string text;
  };
  std::vector<Segment> segments(std::span<const ChatMessage> messages) const;

  Kind kind_;
  std::string name_;                                   // jinja: where the template came from
  std::shared_ptr<const jinja::Template> jinja_;       // jinja: the default template
  std::shared_ptr<const jinja::Template> tool_use_;    // jinja: for requests with tools; may be null
  std::shared_ptr<const ChatSpecialTokens> tokens_;    // jinja
};


// The template for a model. `configured` (config model.chat_template,
// --chat-template) is a built-in name (llama-2, chatml), a path to a Jinja
// file, or empty: then the chat_template of `model_dir`/tokenizer_config.json,
// or when `model_dir` is a GGUF file its tokenizer.chat_template
// (core/gguf_chat_template.hpp). Special tokens come from that
// tokenizer_config.json when it exists, or from the GGUF's vocabulary. Throws
// Error(unsupported) when the model declares no chat template (naming the
// file and the config key), Error(invalid_config) for an unreadable
// configured file, and what from_jinja throws for a template outside the
// subset (prefixed with the file it came from).
ChatTemplate resolve_chat_template(std::string_view configured, const std::filesystem::path& model_dir);

// Whether `name` is a built-in template name (for config validation).
bool is_builtin_chat_template(std::string_view name);

}  // namespace llmk
