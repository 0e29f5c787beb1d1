// A GGUF file's byte-level BPE tokenizer (tokenizer.ggml.model "gpt2") as
// the tokenizer.json backend runs it: the same vocabulary, merges, split
// regex, byte-level mapping, added tokens and BOS rule that the model's own
// tokenizer.json has, rebuilt from the metadata llama.cpp's converter writes.
//
// tokenizer.ggml.pre names the pre-tokenizer: every name llama.cpp knows
// for byte-level BPE models (llama-bpe, llama3, qwen2, smollm, deepseek-llm,
// deepseek-coder, deepseek-v3, falcon, starcoder, tekken, chatglm-bpe,
// bloom, chameleon, default, gpt2 and their aliases; see
// core/gguf_bpe_tokenizer.cpp), each as the regexes that split the text in
// turn, plus the name's model settings (ignore_merges for Llama 3 and
// Tekken, NFC for Qwen2, no BOS for chatglm-bpe).
// Control tokens (type 3) become special added tokens, user-defined ones
// (type 4) added tokens that decode as text; both are matched in the raw
// text before anything else, as tokenizers matches them.
#pragma once

#include <string>

#include "core/gguf_tokenizer.hpp"
#include "core/tokenizer_json_spec.hpp"

namespace llmk::detail {

// Throws Error(unsupported) naming a pre-tokenizer outside the list above,
// Error(bad_checkpoint) for a merge naming a token the vocabulary lacks
// (when the backend is built) or a duplicate token.
TokenizerJsonSpec gguf_bpe_spec(const GgufBpeVocab& vocab, const std::string& where);

}  // namespace llmk::detail
