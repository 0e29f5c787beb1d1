#include "core/gguf_tokenizer.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/gguf_metadata.hpp"

namespace llmk {
namespace {

using namespace gguf_meta;

// Protocol-buffer wire format, the few encodings a ModelProto needs.
class ProtoWriter {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void tag(uint32_t field, uint32_t wire_type) { varint((uint64_t(field) << 3) | wire_type); }
  // int32 fields: negative values are sign-extended to 64 bits (10 bytes).
  void int_field(uint32_t field, int64_t v) {
    tag(field, 0);
    varint(static_cast<uint64_t>(v));
  }
  void bytes_field(uint32_t field, const std::string& s) {
    tag(field, 2);
    varint(s.size());
    out_ += s;
  }
  void float_field(uint32_t field, float f) {
    tag(field, 5);
    char b[4];
    std::memcpy(b, &f, 4);  // little-endian hosts
    out_.append(b, 4);
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// sentencepiece.ModelProto field numbers (sentencepiece_model.proto).
constexpr uint32_t kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3;
constexpr uint32_t kPiecePiece = 1, kPieceScore = 2, kPieceType = 3;
constexpr uint32_t kTrainerModelType = 3, kTrainerByteFallback = 35, kTrainerUnkId = 40, kTrainerBosId = 41,
                   kTrainerEosId = 42, kTrainerPadId = 43, kTrainerUnkPiece = 45, kTrainerBosPiece = 46,
                   kTrainerEosPiece = 47, kTrainerPadPiece = 48;
constexpr uint32_t kNormName = 1, kNormAddDummyPrefix = 3, kNormRemoveExtraWhitespaces = 4,
                   kNormEscapeWhitespaces = 5;
constexpr int64_t kModelTypeBpe = 2;
// Token types shared by GGUF and sentencepiece: 1 normal, 2 unknown,
// 3 control, 4 user-defined, 5 unused, 6 byte.
constexpr int64_t kTypeUnknown = 2, kTypeByte = 6;

std::vector<int32_t> token_types(const GgufFile& f, size_t num_tokens) {
  const std::string key = "tokenizer.ggml.token_type";
  std::vector<int32_t> types(num_tokens, 1);
  if (auto t = get_number_array(f, key)) {
    if (t->size() != num_tokens)
      fail_key(f, key, "has " + std::to_string(t->size()) + " entries but there are " + std::to_string(num_tokens) +
                           " tokens");
    for (size_t i = 0; i < num_tokens; ++i) {
      const double v = (*t)[i];
      if (!(v >= 1 && v <= 6) || v != static_cast<int32_t>(v))
        fail_key(f, key, "entry " + std::to_string(i) + " = " + std::to_string(v) + " is not a token type (1..6)");
      types[i] = static_cast<int32_t>(v);
    }
  }
  return types;
}

std::vector<std::string> require_tokens(const GgufFile& f) {
  auto tokens = get_string_array(f, "tokenizer.ggml.tokens");
  if (!tokens) fail_key(f, "tokenizer.ggml.tokens", "is missing (required for a tokenizer)");
  if (tokens->empty()) fail_key(f, "tokenizer.ggml.tokens", "is empty");
  return std::move(*tokens);
}

// A special token id: -1 when absent, else in [0, num_tokens).
int32_t special_id(const GgufFile& f, const std::string& key, size_t num_tokens) {
  if (f.find(key) == nullptr) return -1;
  const int32_t id = get_int(f, key, std::nullopt, 0);
  if (static_cast<size_t>(id) >= num_tokens)
    fail_key(f, key, "= " + std::to_string(id) + " is outside the " + std::to_string(num_tokens) + " tokens");
  return id;
}

void require_model(const GgufFile& f, const std::string& want) {
  const std::string model = gguf_tokenizer_model(f);
  if (model != want)
    throw Error(ErrorCode::unsupported,
                f.name() + ": tokenizer.ggml.model is '" + model + "', not '" + want + "'");
}

}  // namespace

std::string gguf_tokenizer_model(const GgufFile& f) { return get_string(f, "tokenizer.ggml.model").value_or(""); }

std::string gguf_sentencepiece_model_proto(const GgufFile& f) {
  const std::string model = gguf_tokenizer_model(f);
  if (model == "gpt2")
    throw Error(ErrorCode::unsupported,
                f.name() + ": tokenizer.ggml.model 'gpt2' is byte-level BPE, not sentencepiece "
                           "(Tokenizer loads it through gguf_bpe_vocab)");
  if (model != "llama")
    throw Error(ErrorCode::unsupported, f.name() + ": tokenizer.ggml.model '" + model +
                                            "' is not supported (llama; gpt2 is read but not yet usable)");
  const std::vector<std::string> tokens = require_tokens(f);
  const size_t n = tokens.size();
  const auto scores = get_number_array(f, "tokenizer.ggml.scores");
  if (!scores) fail_key(f, "tokenizer.ggml.scores", "is missing (required by a 'llama' tokenizer)");
  if (scores->size() != n)
    fail_key(f, "tokenizer.ggml.scores",
             "has " + std::to_string(scores->size()) + " entries but there are " + std::to_string(n) + " tokens");
  const std::vector<int32_t> types = token_types(f, n);
  const int32_t bos = special_id(f, "tokenizer.ggml.bos_token_id", n);
  const int32_t eos = special_id(f, "tokenizer.ggml.eos_token_id", n);
  const int32_t pad = special_id(f, "tokenizer.ggml.padding_token_id", n);
  int32_t unk = special_id(f, "tokenizer.ggml.unknown_token_id", n);
  bool byte_fallback = false;
  for (size_t i = 0; i < n; ++i) {
    byte_fallback |= types[i] == kTypeByte;
    if (unk < 0 && types[i] == kTypeUnknown) unk = static_cast<int32_t>(i);
  }
  if (unk < 0) fail_key(f, "tokenizer.ggml.unknown_token_id", "is missing and no token has the unknown type");

  ProtoWriter model_proto;
  for (size_t i = 0; i < n; ++i) {
    ProtoWriter piece;
    piece.bytes_field(kPiecePiece, tokens[i]);
    piece.float_field(kPieceScore, static_cast<float>((*scores)[i]));
    piece.int_field(kPieceType, types[i]);
    model_proto.bytes_field(kModelPieces, piece.bytes());
  }
  ProtoWriter trainer;
  trainer.int_field(kTrainerModelType, kModelTypeBpe);
  trainer.int_field(kTrainerByteFallback, byte_fallback ? 1 : 0);
  trainer.int_field(kTrainerUnkId, unk);
  trainer.int_field(kTrainerBosId, bos);
  trainer.int_field(kTrainerEosId, eos);
  trainer.int_field(kTrainerPadId, pad);
  // sentencepiece finds bos/eos/pad by piece text, so name the actual pieces.
  trainer.bytes_field(kTrainerUnkPiece, tokens[unk]);
  if (bos >= 0) trainer.bytes_field(kTrainerBosPiece, tokens[bos]);
  if (eos >= 0) trainer.bytes_field(kTrainerEosPiece, tokens[eos]);
  if (pad >= 0) trainer.bytes_field(kTrainerPadPiece, tokens[pad]);
  model_proto.bytes_field(kModelTrainerSpec, trainer.bytes());
  ProtoWriter normalizer;
  normalizer.bytes_field(kNormName, "identity");
  normalizer.int_field(kNormAddDummyPrefix, get_bool(f, "tokenizer.ggml.add_space_prefix", true) ? 1 : 0);
  normalizer.int_field(kNormRemoveExtraWhitespaces, 0);
  normalizer.int_field(kNormEscapeWhitespaces, 1);
  model_proto.bytes_field(kModelNormalizerSpec, normalizer.bytes());
  return model_proto.bytes();
}

std::string gguf_sentencepiece_model_proto(const std::filesystem::path& file) {
  return gguf_sentencepiece_model_proto(GgufFile(file));
}

GgufBpeVocab gguf_bpe_vocab(const GgufFile& f) {
  require_model(f, "gpt2");
  GgufBpeVocab v;
  v.tokens = require_tokens(f);
  v.token_types = token_types(f, v.tokens.size());
  auto merges = get_string_array(f, "tokenizer.ggml.merges");
  if (!merges) fail_key(f, "tokenizer.ggml.merges", "is missing (required by a 'gpt2' tokenizer)");
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() || m.find(' ', space + 1) != std::string::npos)
      fail_key(f, "tokenizer.ggml.merges", "entry " + std::to_string(i) + " '" + m + "' is not two tokens split by one space");
  }
  v.merges = std::move(*merges);
  v.pre_tokenizer = get_string(f, "tokenizer.ggml.pre").value_or("default");
  v.bos_id = special_id(f, "tokenizer.ggml.bos_token_id", v.tokens.size());
  v.eos_id = special_id(f, "tokenizer.ggml.eos_token_id", v.tokens.size());
  v.add_bos = get_bool(f, "tokenizer.ggml.add_bos_token", false);
  return v;
}

}  // namespace llmk
