// The tokenizer (sentencepiece's tokenizer.model or Hugging Face's
// tokenizer.json, one class with two backends) plus an incremental
// detokenizer for streaming.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llmk {

class Tokenizer {
 public:
  // How decode() renders a piece; one per id, computed at load.
  enum class PieceKind : uint8_t {
    normal,   // text; '▁' stands for ' '
    byte,     // raw bytes (byte fallback <0xNN>, or any byte-level BPE token), joined
              // with neighbouring bytes into UTF-8
    control,  // <s>, </s>, special added tokens: invisible in decoded text
    unknown,  // sentencepiece's <unk>: decodes to " \u2047 "
  };

  // How decode() treats runs of byte pieces and leading spaces; fixed by the
  // tokenizer file, the same for decode() and IncrementalDetokenizer.
  enum class ByteErrors : uint8_t {
    per_byte,   // sentencepiece: at each position a valid character is copied, else one U+FFFD per byte
    whole_run,  // HF ByteFallback: a run that is not entirely valid UTF-8 becomes one U+FFFD per byte
    lossy,      // HF ByteLevel (UTF-8 decoding with errors replaced): one U+FFFD per maximal
                // invalid subsequence, as Unicode recommends
  };
  enum class LeadingSpace : uint8_t {
    keep,
    strip_first_piece,  // sentencepiece: the first visible normal piece loses one leading ' '
    strip_text,         // HF Strip decoder after Fuse: the decoded text loses one leading ' '
    first_token_unspaced,  // HF Metaspace decoder (prepend_scheme always or first): the first
                           // token loses every replacement character instead of showing ' '
  };
  struct DecodeRules {
    ByteErrors byte_errors = ByteErrors::per_byte;
    bool control_ends_byte_run = true;  // sentencepiece: yes; HF drops special tokens before decoding
    LeadingSpace leading_space = LeadingSpace::strip_first_piece;
  };

  // `file` is a sentencepiece model (tokenizer.model) or, when its name ends
  // in ".json", a Hugging Face tokenizer.json (BPE models: byte-level as in
  // Llama 3 and Qwen2, or sentencepiece-style with byte fallback as in the HF
  // conversions of Llama 2 and Mistral; see core/tokenizer_json.hpp). For
  // tokenizer.json, BOS/EOS come from tokenizer_config.json beside it, else
  // config.json's bos/eos_token_id, else the post-processor's template.
  // Throws Error(bad_checkpoint) naming the file (and for JSON the path
  // inside it) when it cannot be loaded or uses something unsupported.
  explicit Tokenizer(const std::filesystem::path& model_file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encoding as Hugging Face's `tokenizers` does it, BOS first when asked:
  // the text of every added or special token ("<s>", "<|im_start|>",
  // "<|eot_id|>") becomes that token's id, with its lstrip, rstrip,
  // single_word and normalized rules (tokenizer.json); the text between
  // them is encoded by the model. sentencepiece: its control and unknown
  // pieces are matched the same way and each stretch between them is encoded
  // with its own dummy prefix, as Hugging Face's Llama 2 tokenizer does.
  // tokenizer.json: add_bos applies the post-processor's template (Llama 3:
  // BOS; Qwen2: nothing). Invalid UTF-8 in `text` is read as U+FFFD
  // (tokenizer.json).
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // The same as encode(); named for callers that encode rendered text with
  // special-token text in it, such as a chat template's output.
  std::vector<int32_t> encode_with_special_tokens(std::string_view text, bool add_bos) const;
  // Decoding as the tokenizer's own library does it (Hugging Face: with
  // special tokens skipped). sentencepiece: control tokens vanish, the first
  // visible piece loses one leading space, byte pieces join into UTF-8 with
  // one U+FFFD per byte that is not part of a valid character. See
  // DecodeRules for tokenizer.json. Throws
  // Error(invalid_argument) for an id outside [0, vocab_size).
  std::string decode(std::span<const int32_t> ids) const;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(std::span<const int32_t>(ids));
  }
  // The text piece of one id, with byte-fallback pieces as raw bytes and '▁'
  // as ' '; control and unknown pieces as written in the model ("<s>",
  // "<unk>"). Meant for logprob listings, not for building text.
  std::string id_to_piece(int32_t id) const;
  // The bytes an id adds to a decoded text away from its start: '▁' as ' ',
  // byte pieces as their raw bytes, "" for control pieces (the vocabulary
  // structured outputs match text against, core/grammar.hpp).
  const std::string& token_bytes(int32_t id) const { return surface(id); }
  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;  // -1 when the model has none
  PieceKind piece_kind(int32_t id) const;  // id must be in range
  const DecodeRules& decode_rules() const;
  // The model file this tokenizer was loaded from (for messages).
  const std::filesystem::path& model_file() const;

 private:
  friend class IncrementalDetokenizer;
  // Surface text decode() gives the piece in the middle of a text: '▁' as
  // ' ', "" for control, " \u2047 " for unknown, the bytes for byte pieces.
  const std::string& surface(int32_t id) const;
  // The surface as the first token of a text (LeadingSpace::first_token_unspaced).
  const std::string& first_surface(int32_t id) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the backend (sentencepiece or tokenizer.json)
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
// A delta never contains a broken UTF-8 sequence: bytes of byte pieces are
// held back until they form a character, and bytes that cannot form one
// become U+FFFD exactly as decode() replaces them (Tokenizer::DecodeRules).
// Under ByteErrors::whole_run (HF ByteFallback) a whole run of byte pieces is
// held back until a non-byte piece ends it, since one bad byte anywhere in
// the run changes how all of it decodes; otherwise at most 3 bytes wait.
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
  // Bytes held back (0..3, or the run so far under ByteErrors::whole_run).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  // Emits every complete or impossible character at the front of pending_;
  // with `end_of_run`, the rest too (each byte as U+FFFD).
  void drain_pending(std::string& out, bool end_of_run);
  // LeadingSpace::strip_text: the first non-empty delta loses one leading ' '.
  void strip_leading_space(std::string& out);

  const Tokenizer& tokenizer_;
  bool continues_prompt_;
  bool first_ = true;    // no visible piece seen yet
  bool strip_text_;      // LeadingSpace::strip_text: the next non-empty delta loses a leading ' '
  std::string pending_;  // bytes of an incomplete UTF-8 character
  std::string text_;
};

// Length of the valid UTF-8 character at the start of `bytes` (1..4), 0 when
// `bytes` is a proper prefix of a valid character (more bytes needed), -1
// when no valid character starts there. Strict: no overlong forms, no
// surrogates, nothing above U+10FFFF.
int utf8_char_length(std::string_view bytes);
// Length of the maximal invalid subsequence at the start of `bytes` when no
// valid character starts there (1..3): the bytes one U+FFFD replaces in
// Unicode's recommended (and Rust's from_utf8_lossy) practice.
int utf8_invalid_length(std::string_view bytes);
// `text` with every maximal invalid subsequence replaced by U+FFFD.
std::string utf8_lossy(std::string_view text);
// True when `text` is entirely valid UTF-8 under the same rules.
bool is_valid_utf8(std::string_view text);

}  // namespace llmk
