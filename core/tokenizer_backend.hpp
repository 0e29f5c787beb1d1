// The interface behind llmk::Tokenizer: one backend per file format
// (sentencepiece's tokenizer.model, Hugging Face's tokenizer.json). Internal
// to core/: callers use Tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer.hpp"

namespace llmk::detail {

// What a backend reports about its vocabulary, filled once at load.
struct PieceTable {
  std::vector<Tokenizer::PieceKind> kinds;  // [vocab_size]
  std::vector<std::string> surfaces;        // [vocab_size], see Tokenizer::surface
  std::vector<std::string> pieces;          // [vocab_size], see Tokenizer::id_to_piece
  std::vector<std::string> first_surfaces;  // [vocab_size] under LeadingSpace::first_token_unspaced, else empty
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  Tokenizer::DecodeRules rules;
};

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Ids of `text` without any BOS/EOS; the text of added and special
  // tokens becomes their ids (see Tokenizer::encode).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids the backend adds around a text when asked for BOS (its
  // post-processor's template for tokenizer.json).
  virtual void add_special_tokens(std::vector<int32_t>& ids) const = 0;
  // `ids` are in range (checked by Tokenizer).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual const PieceTable& table() const = 0;
};

std::unique_ptr<TokenizerBackend> make_sentencepiece_backend(const std::filesystem::path& model_file);
std::unique_ptr<TokenizerBackend> make_tokenizer_json_backend(const std::filesystem::path& json_file);

}  // namespace llmk::detail
