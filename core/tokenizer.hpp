// sentencepiece tokenizer plus an incremental detokenizer for streaming.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmk {

class Tokenizer {
 public:
  // How decode() renders a piece; one per id, computed at load.
  enum class PieceKind : uint8_t {
    normal,   // text; '▁' stands for ' '
    byte,     // byte fallback <0xNN>: one raw byte, joined with neighbouring bytes into UTF-8
    control,  // <s>, </s>: invisible in decoded text
    unknown,  // <unk>: decodes to " \u2047 "
  };

  // Throws Error(bad_checkpoint) naming the file when it cannot be loaded.
  explicit Tokenizer(const std::filesystem::path& model_file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // sentencepiece encoding (with its dummy-prefix '▁'), BOS first when asked.
  // Control-token text such as "<s>" in `text` stays plain text.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // sentencepiece decoding: control tokens vanish, the first visible piece
  // loses one leading space, byte pieces join into UTF-8 with one U+FFFD
  // per byte that is not part of a valid character. Throws
  // Error(invalid_argument) for an id outside [0, vocab_size).
  std::string decode(std::span<const int32_t> ids) const;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(std::span<const int32_t>(ids));
  }
  // The text piece of one id, with byte-fallback pieces as raw bytes and '▁'
  // as ' '; control and unknown pieces as written in the model ("<s>",
  // "<unk>"). Meant for logprob listings, not for building text.
  std::string id_to_piece(int32_t id) const;
  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;  // -1 when the model has none
  PieceKind piece_kind(int32_t id) const;  // id must be in range
  // Pieces that stand for one id wherever their text appears in a rendered
  // chat template: the control pieces ("<s>", "</s>"), as (text, id).
  // (User-defined pieces are not listed: sentencepiece 0.1.97, Debian 12's,
  // does not say which pieces are user-defined.)
  // encode() keeps such text as plain text; encode_chat_text()
  // (core/chat_template.hpp) splits on them.
  const std::vector<std::pair<std::string, int32_t>>& special_pieces() const;
  // The model file this tokenizer was loaded from (for messages).
  const std::filesystem::path& model_file() const;

 private:
  friend class IncrementalDetokenizer;
  // Surface text decode() gives the piece in the middle of a text: '▁' as
  // ' ', "" for control, " \u2047 " for unknown, the byte for byte pieces.
  const std::string& surface(int32_t id) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Turns a growing list of token ids into text deltas, O(1) amortised per
// token (no re-decoding of the history).
//
// Contract: the concatenation of all push() results and flush() equals
// Tokenizer::decode(ids) of the pushed ids when continues_prompt is false.
// When continues_prompt is true it equals decode(prompt + ids) minus
// decode(prompt) for a prompt that has at least one visible (non-control)
// token and does not end inside a byte-fallback character: the first
// visible generated piece keeps its leading space, because in sentencepiece
// only the first visible piece of the whole text loses it. A prompt made of
// BOS alone counts as not continuing (decode would drop the space).
//
// A delta never contains a broken UTF-8 sequence: bytes of byte-fallback
// pieces are held back until they form a character. Bytes that cannot form
// one become U+FFFD, one per byte, exactly as sentencepiece decodes them.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool continues_prompt);
  // Decides continues_prompt from the prompt ids (true when one is visible).
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids);
  // Appends one token; returns the newly complete text (possibly empty).
  // Throws Error(invalid_argument) for an id out of range.
  std::string push(int32_t id);
  // Whatever is still held back (each byte of an incomplete character
  // becomes U+FFFD). Further pushes continue as a new byte run.
  std::string flush();
  const std::string& text() const { return text_; }  // all text emitted so far
  // Bytes held back as the start of an incomplete character (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  // Emits every complete or impossible character at the front of pending_;
  // with `end_of_run`, the rest too (each byte as U+FFFD).
  void drain_pending(std::string& out, bool end_of_run);

  const Tokenizer& tokenizer_;
  bool continues_prompt_;
  bool first_ = true;    // no visible piece seen yet
  std::string pending_;  // bytes of an incomplete UTF-8 character
  std::string text_;
};

// Length of the valid UTF-8 character at the start of `bytes` (1..4), 0 when
// `bytes` is a proper prefix of a valid character (more bytes needed), -1
// when no valid character starts there. Strict: no overlong forms, no
// surrogates, nothing above U+10FFFF.
int utf8_char_length(std::string_view bytes);
// True when `text` is entirely valid UTF-8 under the same rules.
bool is_valid_utf8(std::string_view text);

}  // namespace llmk
