// Unicode tools for tokenizer.json: regexes with Unicode properties (PCRE2,
// JIT-compiled), normalization forms (ICU), and the byte-level alphabet of
// GPT-2-style BPE.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmk {

// A compiled regex over UTF-8 with Unicode semantics (\p{L}, \s and case
// folding follow Unicode). Immutable and shareable between threads.
class UnicodeRegex {
 public:
  // Throws Error(bad_checkpoint) with PCRE2's message and offset.
  explicit UnicodeRegex(const std::string& pattern);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Appends the [begin, end) byte ranges of successive non-overlapping,
  // non-empty matches in `text` (valid UTF-8).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  void* code_;  // pcre2_code_8*
};

enum class NormalForm : uint8_t { nfc, nfd, nfkc, nfkd };
// Throws Error(unsupported) when this build has no ICU.
std::string normalize_unicode(std::string_view text, NormalForm form);
bool have_unicode_normalization();

// GPT-2's reversible map from bytes to printable characters: the printable
// Latin-1 bytes stand for themselves, the others for U+0100 onwards.
struct ByteLevelAlphabet {
  std::string utf8_of_byte[256];  // the character standing for each byte, as UTF-8
  // The byte a code point stands for, or -1.
  static int byte_of(uint32_t code_point);
  static const ByteLevelAlphabet& get();
};

// Decodes the UTF-8 character at `text[i]` (valid UTF-8 assumed), advancing i.
uint32_t next_code_point(std::string_view text, size_t& i);

}  // namespace llmk
