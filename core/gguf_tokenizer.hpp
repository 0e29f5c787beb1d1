// Tokenizers stored in GGUF metadata (tokenizer.ggml.*).
//
// "llama" (sentencepiece BPE): tokens, scores and token_type become a
// sentencepiece ModelProto, serialized here and loaded by Tokenizer through
// sentencepiece's LoadFromSerializedProto; the normalizer is sentencepiece's
// identity with '▁' for spaces and a dummy prefix unless
// tokenizer.ggml.add_space_prefix is false, as llama.cpp tokenizes.
//
// "gpt2" (byte-level BPE as in tokenizer.json): tokens, merges and the
// pre-tokenizer name are returned as GgufBpeVocab, which
// core/gguf_bpe_tokenizer.hpp turns into the tokenizer.json backend's spec.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/gguf.hpp"

namespace llmk {

// tokenizer.ggml.model ("llama", "gpt2", ...); empty when absent.
std::string gguf_tokenizer_model(const GgufFile& file);

// The serialized sentencepiece ModelProto for a "llama" tokenizer. Throws
// Error(bad_checkpoint) naming the key for missing or inconsistent arrays
// (lengths differ, a token type outside 1..6, a special id out of range),
// Error(unsupported) for another tokenizer model.
std::string gguf_sentencepiece_model_proto(const GgufFile& file);
std::string gguf_sentencepiece_model_proto(const std::filesystem::path& file);

struct GgufBpeVocab {
  std::vector<std::string> tokens;      // id -> token text (byte-level alphabet)
  std::vector<int32_t> token_types;     // id -> 1 normal, 3 control, 4 user-defined, ... (1 when absent)
  std::vector<std::string> merges;      // rank order, "left right"
  std::string pre_tokenizer;            // tokenizer.ggml.pre ("llama-bpe", "qwen2", ...; "default" when absent)
  int32_t bos_id = -1, eos_id = -1;     // -1 when absent
  bool add_bos = false;
};

// The data of a "gpt2" tokenizer. Throws Error(bad_checkpoint) naming the
// key when tokens or merges are missing or malformed, Error(unsupported)
// for another tokenizer model.
GgufBpeVocab gguf_bpe_vocab(const GgufFile& file);

}  // namespace llmk
