// Chat prompts: OpenAI-style message lists rendered with a built-in template.
//
// Two templates, chosen by name ("llama-2", "chatml") from the config or
// detected from the chat_template string of the model's tokenizer_config.json
// ("<|im_start|>" -> chatml, "[INST]" -> llama-2). Anything else is refused
// with Error(unsupported) rather than rendered wrongly; there is no Jinja.
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
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llmk {

class Tokenizer;

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

class ChatTemplate {
 public:
  enum class Kind { llama2, chatml };

  explicit ChatTemplate(Kind kind) : kind_(kind) {}
  // "llama-2" (or "llama2") and "chatml"; Error(invalid_argument) otherwise.
  static ChatTemplate by_name(std::string_view name);
  // From a Hugging Face Jinja chat_template; Error(unsupported) when it is
  // neither recognisable form.
  static ChatTemplate detect(std::string_view jinja_template);

  Kind kind() const { return kind_; }
  std::string_view name() const;

  // The prompt as text, with llama-2's BOS/EOS written as "<s>"/"</s>" (for
  // logs and display; encode() is what the engine feeds the model; chatml's
  // text has no BOS, encode() adds it). Throws
  // Error(invalid_argument) for an empty list, an unknown role, or (llama-2)
  // roles out of order.
  std::string render(std::span<const ChatMessage> messages) const;
  // The prompt as token ids. add_bos: whether the model wants a BOS first
  // (tokenizer_config's add_bos_token); llama-2 always has one per turn.
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, const Tokenizer& tokenizer,
                              bool add_bos = true) const;

 private:
  struct Segment {
    enum class Type { text, bos, eos } type;
    std::string text;
  };
  std::vector<Segment> segments(std::span<const ChatMessage> messages) const;

  Kind kind_;
};

// The template for a model: `configured` (config model.chat_template) when
// not empty, else detected from `model_dir`/tokenizer_config.json. Throws
// Error(unsupported) when the model declares no chat template or an
// unrecognised one, naming the file and suggesting the config key.
ChatTemplate resolve_chat_template(std::string_view configured, const std::filesystem::path& model_dir);

}  // namespace llmk
