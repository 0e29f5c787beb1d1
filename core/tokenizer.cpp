#include "core/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_tokenizer.hpp"

namespace llmk {

namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // '▁' U+2581
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
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

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

int utf8_char_length(std::string_view bytes) {
  if (bytes.empty()) return 0;
  const auto b0 = static_cast<unsigned char>(bytes[0]);
  if (b0 < 0x80) return 1;
  int length = 0;
  // Allowed range of the second byte: it excludes overlong forms (E0, F0),
  // surrogates (ED) and code points above U+10FFFF (F4).
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;  // continuation byte, C0/C1 or F5..FF
  }
  for (int i = 1; i < length; ++i) {
    if (static_cast<size_t>(i) >= bytes.size()) return 0;
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (i == 1 ? (b < lo || b > hi) : !is_continuation(b)) return -1;
  }
  return length;
}

bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const int n = utf8_char_length(text.substr(i));
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
  std::filesystem::path model_file;
  std::vector<PieceKind> kinds;     // [vocab_size]
  std::vector<std::string> surfaces;  // [vocab_size], see Tokenizer::surface
  std::vector<std::string> pieces;    // [vocab_size], see Tokenizer::id_to_piece
};

Tokenizer::Tokenizer(const std::filesystem::path& model_file) : impl_(std::make_unique<Impl>()) {
  impl_->model_file = model_file;
  if (!std::filesystem::is_regular_file(model_file)) {
    throw Error(ErrorCode::bad_checkpoint, "tokenizer model " + model_file.string() + ": no such file");
  }
  // A .gguf model carries its tokenizer in metadata (core/gguf_tokenizer.hpp).
  const auto status = is_gguf_file(model_file)
                          ? impl_->processor.LoadFromSerializedProto(gguf_sentencepiece_model_proto(model_file))
                          : impl_->processor.Load(model_file.string());
  if (!status.ok()) {
    throw Error(ErrorCode::bad_checkpoint,
                "tokenizer model " + model_file.string() + " cannot be loaded: " + status.ToString());
  }
  auto& sp = impl_->processor;
  const int n = sp.GetPieceSize();
  if (n <= 0) throw Error(ErrorCode::bad_checkpoint, "tokenizer model " + model_file.string() + " has no pieces");
  impl_->kinds.resize(n);
  impl_->surfaces.resize(n);
  impl_->pieces.resize(n);
  for (int id = 0; id < n; ++id) {
    const std::string& piece = sp.IdToPiece(id);
    if (sp.IsByte(id)) {
      // "<0xNN>"
      if (piece.size() != 6) {
        throw Error(ErrorCode::bad_checkpoint, "tokenizer model " + model_file.string() +
                                                   ": malformed byte piece '" + piece + "'");
      }
      const char byte = static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
      impl_->kinds[id] = PieceKind::byte;
      impl_->surfaces[id] = std::string(1, byte);
      impl_->pieces[id] = impl_->surfaces[id];
    } else if (sp.IsControl(id)) {
      impl_->kinds[id] = PieceKind::control;
      impl_->pieces[id] = piece;
    } else if (sp.IsUnknown(id)) {
      impl_->kinds[id] = PieceKind::unknown;
      impl_->surfaces[id] = std::string(kUnknownSurface);
      impl_->pieces[id] = piece;
    } else {
      impl_->kinds[id] = PieceKind::normal;
      impl_->surfaces[id] = replace_space_symbol(piece);
      impl_->pieces[id] = impl_->surfaces[id];
    }
  }
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  if (!status.ok()) {
    throw Error(ErrorCode::invalid_argument, "tokenizer " + impl_->model_file.string() +
                                                 " cannot encode the text: " + status.ToString());
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + 1);
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> sp_ids(ids.begin(), ids.end());
  for (int id : sp_ids) {
    if (id < 0 || id >= vocab_size()) {
      throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                   std::to_string(vocab_size()) + " (" +
                                                   impl_->model_file.string() + ")");
    }
  }
  std::string text;
  const auto status = impl_->processor.Decode(sp_ids, &text);
  if (!status.ok()) {
    throw Error(ErrorCode::invalid_argument, "tokenizer " + impl_->model_file.string() +
                                                 " cannot decode the ids: " + status.ToString());
  }
  return text;
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error(ErrorCode::invalid_argument,
                "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_size()));
  }
  return impl_->pieces[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->kinds.size()); }
int32_t Tokenizer::bos_id() const { return impl_->processor.bos_id(); }
int32_t Tokenizer::eos_id() const { return impl_->processor.eos_id(); }
Tokenizer::PieceKind Tokenizer::piece_kind(int32_t id) const { return impl_->kinds[id]; }
const std::filesystem::path& Tokenizer::model_file() const { return impl_->model_file; }
const std::string& Tokenizer::surface(int32_t id) const { return impl_->surfaces[id]; }

// ---------------------------------------------------------------------------

namespace {

bool prompt_has_visible_piece(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids) {
  for (int32_t id : prompt_ids) {
    if (id >= 0 && id < tokenizer.vocab_size() && tokenizer.piece_kind(id) != Tokenizer::PieceKind::control) {
      return true;
    }
  }
  return false;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool continues_prompt)
    : tokenizer_(tokenizer), continues_prompt_(continues_prompt) {}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids)
    : IncrementalDetokenizer(tokenizer, prompt_has_visible_piece(tokenizer, prompt_ids)) {}

void IncrementalDetokenizer::drain_pending(std::string& out, bool end_of_run) {
  // sentencepiece's rule for a run of byte pieces: at each position, a valid
  // character is copied, anything else becomes U+FFFD and consumes one byte.
  // pending_ holds at most 3 bytes (a proper prefix of a character), so this
  // loop is O(1) per pushed byte.
  size_t start = 0;
  while (start < pending_.size()) {
    const int n = utf8_char_length(std::string_view(pending_).substr(start));
    if (n > 0) {
      out.append(pending_, start, static_cast<size_t>(n));
      start += static_cast<size_t>(n);
    } else if (n < 0 || end_of_run) {
      out.append(kReplacement);
      start += 1;
    } else {
      break;  // an incomplete character: wait for more bytes
    }
  }
  pending_.erase(0, start);
}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (id < 0 || id >= tokenizer_.vocab_size()) {
    throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                 std::to_string(tokenizer_.vocab_size()));
  }
  std::string out;
  const auto kind = tokenizer_.piece_kind(id);
  if (kind == Tokenizer::PieceKind::byte) {
    pending_ += tokenizer_.surface(id);
    first_ = false;
    drain_pending(out, /*end_of_run=*/false);
  } else {
    // Any other piece ends a byte run, even an invisible control token.
    drain_pending(out, /*end_of_run=*/true);
    if (kind != Tokenizer::PieceKind::control) {
      std::string_view surface = tokenizer_.surface(id);
      if (first_ && !continues_prompt_ && kind == Tokenizer::PieceKind::normal && !surface.empty() &&
          surface.front() == ' ') {
        surface.remove_prefix(1);
      }
      out.append(surface);
      first_ = false;
    }
  }
  text_ += out;
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  drain_pending(out, /*end_of_run=*/true);
  text_ += out;
  return out;
}

}  // namespace llmk
