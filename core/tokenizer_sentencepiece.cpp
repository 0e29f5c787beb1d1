// The sentencepiece backend of llmk::Tokenizer (tokenizer.model).
#include <sentencepiece_processor.h>

#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_tokenizer.hpp"
#include "core/tokenizer_backend.hpp"

namespace llmk::detail {

namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";       // '▁' U+2581
constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";  // " ⁇ ", as sentencepiece writes <unk>

std::string replace_space_symbol(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      out.push_back(' ');
      i += kSpaceSymbol.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

class SentencepieceBackend final : public TokenizerBackend {
 public:
  explicit SentencepieceBackend(const std::filesystem::path& model_file) : model_file_(model_file) {
    // A .gguf model carries its vocabulary in metadata (core/gguf_tokenizer.hpp).
    const auto status = is_gguf_file(model_file)
                            ? processor_.LoadFromSerializedProto(gguf_sentencepiece_model_proto(model_file))
                            : processor_.Load(model_file.string());
    if (!status.ok()) {
      throw Error(ErrorCode::bad_checkpoint,
                  "tokenizer model " + model_file.string() + " cannot be loaded: " + status.ToString());
    }
    const int n = processor_.GetPieceSize();
    if (n <= 0) throw Error(ErrorCode::bad_checkpoint, "tokenizer model " + model_file.string() + " has no pieces");
    table_.kinds.resize(n);
    table_.surfaces.resize(n);
    table_.pieces.resize(n);
    for (int id = 0; id < n; ++id) {
      const std::string& piece = processor_.IdToPiece(id);
      if (processor_.IsByte(id)) {
        // "<0xNN>"
        if (piece.size() != 6) {
          throw Error(ErrorCode::bad_checkpoint,
                      "tokenizer model " + model_file.string() + ": malformed byte piece '" + piece + "'");
        }
        const char byte = static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
        table_.kinds[id] = Tokenizer::PieceKind::byte;
        table_.surfaces[id] = std::string(1, byte);
        table_.pieces[id] = table_.surfaces[id];
      } else if (processor_.IsControl(id)) {
        table_.kinds[id] = Tokenizer::PieceKind::control;
        table_.pieces[id] = piece;
        special_.push_back(id);
      } else if (processor_.IsUnknown(id)) {
        table_.kinds[id] = Tokenizer::PieceKind::unknown;
        table_.surfaces[id] = std::string(kUnknownSurface);
        table_.pieces[id] = piece;
        special_.push_back(id);
      } else {
        table_.kinds[id] = Tokenizer::PieceKind::normal;
        table_.surfaces[id] = replace_space_symbol(piece);
        table_.pieces[id] = table_.surfaces[id];
      }
    }
    table_.bos_id = processor_.bos_id();
    table_.eos_id = processor_.eos_id();
    table_.rules = Tokenizer::DecodeRules{};  // sentencepiece's own
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> out;
    // Leftmost-longest match of control/unknown piece text; the stretches
    // between matches are encoded on their own.
    size_t start = 0, pos = 0;
    while (pos < text.size()) {
      int32_t best = -1;
      size_t best_len = 0;
      for (int32_t id : special_) {
        const std::string& p = table_.pieces[id];
        if (p.size() > best_len && text.compare(pos, p.size(), p) == 0) best = id, best_len = p.size();
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      encode_plain(text.substr(start, pos - start), out);
      out.push_back(best);
      pos += best_len;
      start = pos;
    }
    encode_plain(text.substr(start), out);
    return out;
  }

  void add_special_tokens(std::vector<int32_t>& ids) const override {
    if (table_.bos_id >= 0) ids.insert(ids.begin(), table_.bos_id);
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> sp_ids(ids.begin(), ids.end());
    std::string text;
    const auto status = processor_.Decode(sp_ids, &text);
    if (!status.ok()) {
      throw Error(ErrorCode::invalid_argument,
                  "tokenizer " + model_file_.string() + " cannot decode the ids: " + status.ToString());
    }
    return text;
  }

  const PieceTable& table() const override { return table_; }

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) {
      throw Error(ErrorCode::invalid_argument,
                  "tokenizer " + model_file_.string() + " cannot encode the text: " + status.ToString());
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }

  std::filesystem::path model_file_;
  sentencepiece::SentencePieceProcessor processor_;
  PieceTable table_;
  std::vector<int32_t> special_;  // control and unknown ids, matched in the text by encode()
};

}  // namespace

std::unique_ptr<TokenizerBackend> make_sentencepiece_backend(const std::filesystem::path& model_file) {
  return std::make_unique<SentencepieceBackend>(model_file);
}

}  // namespace llmk::detail
