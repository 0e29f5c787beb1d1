// Hugging Face tokenizer.json, BPE models, as the `tokenizers` library
// encodes and decodes them. Used through llmk::Tokenizer (core/tokenizer.hpp)
// for a file whose name ends in ".json".
//
// Supported, which covers Llama 3, Qwen2/2.5 and the HF conversions of
// Llama 2 and Mistral (legacy or not):
//   model           BPE: vocab, merges as "a b" strings or [a, b] pairs,
//                   unk_token, fuse_unk, byte_fallback, ignore_merges
//   added_tokens    special or not; lstrip, rstrip, single_word, normalized.
//                   Matched in the text (leftmost, longest) before
//                   normalization (normalized: false) or, in their own
//                   normalized form, after it (true).
//   normalizer      NFC, NFD, NFKC, NFKD, Prepend, Replace (String or
//                   Regex pattern), Sequence
//   pre_tokenizer   Split (Regex or String pattern, behavior Isolated),
//                   ByteLevel (add_prefix_space false, use_regex either),
//                   Metaspace (any replacement character, prepend_scheme
//                   always/first/never or the older add_prefix_space,
//                   split true or false), Digits (individual_digits
//                   either, as SmolLM's files use it), Sequence
//   post_processor  TemplateProcessing (its "single" template: the special
//                   tokens around $A), ByteLevel (ids unchanged), Sequence
//   decoder         ByteLevel; Metaspace; or a Sequence of Replace("▁" ->
//                   " ") or Metaspace, ByteFallback, Fuse, Strip(" ", 1, 0)
//                   in that order
// Regexes run on PCRE2 with Unicode properties; the Oniguruma syntax these
// files use (\p{L}, \p{N}, (?i:...), lookahead) means the same there.
// Anything else is an Error(bad_checkpoint) naming the file, the JSON path
// and the value ("tokenizer.json: /model/type: 'WordPiece' is not supported").
#pragma once

#include <filesystem>
#include <memory>

#include "core/tokenizer_backend.hpp"
#include "core/tokenizer_json_spec.hpp"

namespace llmk::detail {

std::unique_ptr<TokenizerBackend> make_tokenizer_json_backend(const std::filesystem::path& json_file);
// The same backend over a spec made elsewhere (a GGUF file's byte-level BPE
// vocabulary, core/gguf_bpe_tokenizer.hpp); `where` names it in errors.
std::unique_ptr<TokenizerBackend> make_tokenizer_json_backend(TokenizerJsonSpec spec, const std::string& where);

}  // namespace llmk::detail
