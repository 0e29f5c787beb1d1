// The parts of a tokenizer.json, parsed and checked (core/tokenizer_json_spec.cpp);
// core/tokenizer_json.cpp runs them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/bpe_model.hpp"
#include "core/unicode_text.hpp"

namespace llmk::detail {

struct AddedTokenSpec {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;  // matched in the normalized text rather than the raw text
};

struct NormalizerStep {
  enum class Kind { unicode, prepend, replace } kind = Kind::unicode;
  NormalForm form = NormalForm::nfc;       // unicode
  std::string text;                        // prepend: the prefix; replace: the literal pattern
  std::string content;                     // replace: the replacement
  std::shared_ptr<UnicodeRegex> regex;     // replace with a Regex pattern
};

// Metaspace's rule for the replacement character in front of a piece:
// always, only in front of the text's first piece, or never.
enum class PrependScheme : uint8_t { always, first, never };

struct PreTokenizerStep {
  enum class Kind { split, byte_level, metaspace } kind = Kind::split;
  std::shared_ptr<UnicodeRegex> regex;  // split (Regex pattern), byte_level with use_regex
  std::string literal;                  // split with a String pattern; metaspace: the replacement character
  PrependScheme prepend = PrependScheme::always;  // metaspace
  bool split = true;                              // metaspace: a piece starts at each replacement character
};

// The decoders Hugging Face runs, in order.
struct DecoderStep {
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind = Kind::byte_level;
  std::string pattern, content;  // replace; strip: content is the stripped character; metaspace: pattern is
                                 // the replacement character
  int strip_start = 0, strip_stop = 0;
  PrependScheme prepend = PrependScheme::always;  // metaspace
};

struct TokenizerJsonSpec {
  StringIdMap vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  BpeOptions bpe;
  std::vector<AddedTokenSpec> added_tokens;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<int32_t> template_prefix, template_suffix;  // ids the post-processor puts around $A
  std::vector<DecoderStep> decoder;
  // BOS/EOS content or id from tokenizer_config.json / config.json beside the file.
  std::optional<int32_t> bos_id, eos_id;
};

// Parses `json_file` (and the configs beside it). Errors name the file, the
// JSON path and the offending value.
TokenizerJsonSpec read_tokenizer_json(const std::filesystem::path& json_file);

}  // namespace llmk::detail
