// Structured outputs: the grammar a request's text must follow (a JSON
// schema, any JSON object, a regex, an EBNF grammar) and the per-token masks
// that keep sampling inside it, on XGrammar's C++ core. This header and
// core/grammar.cpp are the only places that know XGrammar; a build without it
// (LLMK_HAVE_XGRAMMAR off, cmake/LlmkXGrammar.cmake) compiles the same API,
// whose compile() refuses every grammar with Error(unsupported) saying so.
//
// A request's life (docs/structured_outputs.md):
//   front end    StructuredOutput{kind, text, field} from the request's fields
//   tokenizer    GrammarCompiler::compile: the grammar over the model's
//   actor        vocabulary, cached by (kind, text); its refusal is the
//                request's 400, naming `field` and XGrammar's message
//   sampler      one GrammarMatcher per sample: after each sampled token,
//   actor        accept(token) and fill_next_mask() for the next step
//   CPU sampler  the mask sets disallowed logits to -inf before penalties,
//                temperature and truncation (core/token_bitmask.hpp)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace llmk {

class Tokenizer;

enum class GrammarKind : uint8_t {
  json_object,  // any JSON object (response_format json_object); text unused
  json_schema,  // text: a JSON Schema (response_format json_schema, structured_outputs.json)
  regex,        // text: a regular expression the whole output matches
  ebnf,         // text: an EBNF/GBNF grammar whose start rule is `root`
};
const char* to_string(GrammarKind kind) noexcept;

class CompiledGrammar;  // a grammar over one vocabulary, with its token-mask caches

// What a request asks for; `compiled` is filled by the engine.
struct StructuredOutput {
  GrammarKind kind = GrammarKind::json_object;
  std::string text;
  // The request field the grammar came from, as the client spelled it
  // ("response_format", "structured_outputs.regex"): errors name it.
  std::string field;
  std::shared_ptr<const CompiledGrammar> compiled;  // null until compiled
};

// True when this build has XGrammar (structured outputs work).
bool structured_outputs_available() noexcept;
// Why structured outputs are refused in this build ("" when available).
const char* structured_outputs_missing() noexcept;
// Why they are refused for an engine on `executor_device` (executor.device):
// the build's reason, or the device's (masks are applied by the CPU and CUDA
// samplers only); "" when served.
std::string structured_outputs_refusal(const std::string& executor_device);

// Compiles grammars over one tokenizer's vocabulary. The vocabulary handed
// to XGrammar is each token's decoded bytes (Tokenizer::token_bytes, the
// text the detokenizer emits for it mid-text), so every tokenizer llmk reads
// (sentencepiece with byte fallback, byte-level BPE, GGUF vocabularies) is
// given as XGrammar's raw vocabulary: its byte-fallback and byte-level
// decoders would only redo what llmk's tokenizer already did. Control and
// unknown tokens are special (never allowed); `stop_ids` end the text once
// the grammar is complete. Thread-safe; compiled grammars are cached by
// (kind, text) and shared.
class GrammarCompiler {
 public:
  // vocab_size: the sampleable logits columns (ids >= the tokenizer's size
  // are never allowed). Throws Error(unsupported) without XGrammar.
  GrammarCompiler(const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> stop_ids);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Throws FieldError(spec.field, invalid_argument) with XGrammar's message
  // for a schema, regex or grammar it refuses (malformed, unsupported, or
  // one that no text can satisfy).
  std::shared_ptr<const CompiledGrammar> compile(const StructuredOutput& spec);
  int32_t vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Words of a token bitmask over `vocab_size` ids: bit (id % 32) of word
// (id / 32) is set when the id is allowed (XGrammar's layout).
inline int32_t bitmask_words(int32_t vocab_size) { return (vocab_size + 31) / 32; }

// One sample's position in a grammar.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Advances past `token`; false (and no change) when the grammar does not
  // allow it here. A stop token is allowed once the grammar is complete and
  // terminates the matcher.
  bool accept(int32_t token);
  // Undoes the last `num_tokens` accepted tokens (a rejected speculative draft).
  void rollback(int32_t num_tokens);
  // The allowed next tokens, [bitmask_words(vocab_size())]; once terminated,
  // only the stop tokens. Returns false when every token is allowed (the
  // mask need not be applied).
  bool fill_next_mask(std::span<uint32_t> bitmask);
  bool terminated() const;  // a stop token was accepted
  bool completed() const;   // the text so far is a whole match
  int32_t vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmk
