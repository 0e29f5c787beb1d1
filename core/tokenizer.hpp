// sentencepiece tokenizer plus an incremental detokenizer for streaming.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llmk {

class Tokenizer {
 public:
  // Throws Error(bad_checkpoint) naming the file when it cannot be loaded.
  explicit Tokenizer(const std::filesystem::path& model_file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // The text piece of one id, with byte-fallback pieces as raw bytes and '▁' as ' '.
  std::string id_to_piece(int32_t id) const;
  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Turns a growing list of token ids into text deltas. A delta never ends in
// a broken UTF-8 sequence: bytes of an incomplete character are held back
// until the character completes. The first token's leading space (from
// sentencepiece's '▁') is dropped as decode() would drop it, unless the
// detokenizer continues a prompt (then it is kept).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool continues_prompt);
  // Appends one token; returns the newly complete text (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete sequence becomes U+FFFD).
  std::string flush();
  const std::string& text() const { return text_; }  // all text emitted so far

 private:
  const Tokenizer& tokenizer_;
  bool continues_prompt_;
  bool first_ = true;
  std::string pending_;  // bytes of an incomplete UTF-8 character
  std::string text_;
};

}  // namespace llmk
