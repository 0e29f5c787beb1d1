#include "core/tokenizer.hpp"

#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_bpe_tokenizer.hpp"
#include "core/tokenizer_backend.hpp"
#include "core/tokenizer_json.hpp"

namespace llmk {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// What a lead byte announces: the character's length (0 when the byte cannot
// lead one: a continuation byte, C0/C1 or F5..FF) and the allowed range of
// the second byte, which excludes overlong forms (E0, F0), surrogates (ED)
// and code points above U+10FFFF (F4).
struct Utf8Lead {
  int length = 0;
  unsigned char lo = 0x80, hi = 0xBF;
};

Utf8Lead utf8_lead(unsigned char b0) {
  Utf8Lead lead;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    lead.length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    lead.length = 3;
    if (b0 == 0xE0) lead.lo = 0xA0;
    if (b0 == 0xED) lead.hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    lead.length = 4;
    if (b0 == 0xF0) lead.lo = 0x90;
    if (b0 == 0xF4) lead.hi = 0x8F;
  }
  return lead;
}

}  // namespace

int utf8_char_length(std::string_view bytes) {
  if (bytes.empty()) return 0;
  const auto b0 = static_cast<unsigned char>(bytes[0]);
  if (b0 < 0x80) return 1;
  const Utf8Lead lead = utf8_lead(b0);
  const int length = lead.length;
  const unsigned char lo = lead.lo, hi = lead.hi;
  if (length == 0) return -1;  // continuation byte, C0/C1 or F5..FF
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

int utf8_invalid_length(std::string_view bytes) {
  if (bytes.empty()) return 0;
  const auto b0 = static_cast<unsigned char>(bytes[0]);
  const Utf8Lead lead = utf8_lead(b0);
  const int length = lead.length;
  const unsigned char lo = lead.lo, hi = lead.hi;
  if (length == 0) return 1;
  // The lead byte and every following byte that still fits the character.
  int i = 1;
  while (i < length && static_cast<size_t>(i) < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (i == 1 ? (b < lo || b > hi) : !is_continuation(b)) break;
    ++i;
  }
  return i;
}

std::string utf8_lossy(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const int n = utf8_char_length(text.substr(i));
    if (n > 0) {
      out.append(text, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else {
      out.append(kReplacement);
      i += static_cast<size_t>(utf8_invalid_length(text.substr(i)));
    }
  }
  return out;
}

struct Tokenizer::Impl {
  std::filesystem::path model_file;
  std::unique_ptr<detail::TokenizerBackend> backend;
  const detail::PieceTable* table = nullptr;  // owned by backend
};

Tokenizer::Tokenizer(const std::filesystem::path& model_file) : impl_(std::make_unique<Impl>()) {
  impl_->model_file = model_file;
  if (!std::filesystem::is_regular_file(model_file)) {
    throw Error(ErrorCode::bad_checkpoint, "tokenizer model " + model_file.string() + ": no such file");
  }
  if (model_file.extension() == ".json") {
    impl_->backend = detail::make_tokenizer_json_backend(model_file);
  } else if (is_gguf_file(model_file) && gguf_tokenizer_model(GgufFile(model_file)) == "gpt2") {
    const std::string where = model_file.string();
    impl_->backend = detail::make_tokenizer_json_backend(
        detail::gguf_bpe_spec(gguf_bpe_vocab(GgufFile(model_file)), where), where);
  } else {
    impl_->backend = detail::make_sentencepiece_backend(model_file);
  }
  impl_->table = &impl_->backend->table();
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  auto ids = impl_->backend->encode(text);
  if (add_bos) impl_->backend->add_special_tokens(ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_with_special_tokens(std::string_view text, bool add_bos) const {
  return encode(text, add_bos);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                   std::to_string(vocab_size()) + " (" +
                                                   impl_->model_file.string() + ")");
    }
  }
  return impl_->backend->decode(ids);
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error(ErrorCode::invalid_argument,
                "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_size()));
  }
  return impl_->table->pieces[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->table->kinds.size()); }
int32_t Tokenizer::bos_id() const { return impl_->table->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->table->eos_id; }
Tokenizer::PieceKind Tokenizer::piece_kind(int32_t id) const { return impl_->table->kinds[id]; }
const Tokenizer::DecodeRules& Tokenizer::decode_rules() const { return impl_->table->rules; }
const std::filesystem::path& Tokenizer::model_file() const { return impl_->model_file; }
const std::string& Tokenizer::surface(int32_t id) const { return impl_->table->surfaces[id]; }
const std::string& Tokenizer::first_surface(int32_t id) const { return impl_->table->first_surfaces[id]; }

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
    : tokenizer_(tokenizer),
      continues_prompt_(continues_prompt),
      strip_text_(!continues_prompt &&
                  tokenizer.decode_rules().leading_space == Tokenizer::LeadingSpace::strip_text) {}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids)
    : IncrementalDetokenizer(tokenizer, prompt_has_visible_piece(tokenizer, prompt_ids)) {}

void IncrementalDetokenizer::drain_pending(std::string& out, bool end_of_run) {
  switch (tokenizer_.decode_rules().byte_errors) {
    case Tokenizer::ByteErrors::whole_run:
      // Valid as a whole or one U+FFFD per byte: only the run's end decides.
      if (!end_of_run) return;
      if (is_valid_utf8(pending_)) {
        out += pending_;
      } else {
        for (size_t i = 0; i < pending_.size(); ++i) out.append(kReplacement);
      }
      pending_.clear();
      return;
    case Tokenizer::ByteErrors::per_byte:
    case Tokenizer::ByteErrors::lossy:
      break;
  }
  // Left to right, a valid character is copied; otherwise sentencepiece
  // (per_byte) replaces one byte, lossy the maximal invalid subsequence.
  // After draining at most 3 bytes remain (a proper prefix of a character),
  // so the work is O(1) per pushed byte.
  const bool lossy = tokenizer_.decode_rules().byte_errors == Tokenizer::ByteErrors::lossy;
  size_t start = 0;
  while (start < pending_.size()) {
    const std::string_view rest = std::string_view(pending_).substr(start);
    const int n = utf8_char_length(rest);
    if (n > 0) {
      out.append(pending_, start, static_cast<size_t>(n));
      start += static_cast<size_t>(n);
    } else if (n < 0 || end_of_run) {
      out.append(kReplacement);
      start += lossy ? static_cast<size_t>(utf8_invalid_length(rest)) : 1;
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
  const auto& rules = tokenizer_.decode_rules();
  std::string out;
  const auto kind = tokenizer_.piece_kind(id);
  if (kind == Tokenizer::PieceKind::byte) {
    pending_ += tokenizer_.surface(id);
    first_ = false;
    drain_pending(out, /*end_of_run=*/false);
  } else if (kind == Tokenizer::PieceKind::control) {
    // sentencepiece ends a byte run at a control token; Hugging Face drops
    // special tokens before its decoders run, so the run goes on.
    if (rules.control_ends_byte_run) drain_pending(out, /*end_of_run=*/true);
  } else {
    drain_pending(out, /*end_of_run=*/true);
    std::string_view surface = tokenizer_.surface(id);
    if (first_ && !continues_prompt_ && rules.leading_space == Tokenizer::LeadingSpace::strip_first_piece &&
        kind == Tokenizer::PieceKind::normal && !surface.empty() && surface.front() == ' ') {
      surface.remove_prefix(1);
    }
    if (first_ && !continues_prompt_ && rules.leading_space == Tokenizer::LeadingSpace::first_token_unspaced)
      surface = tokenizer_.first_surface(id);
    out.append(surface);
    first_ = false;
  }
  strip_leading_space(out);
  text_ += out;
  return out;
}

void IncrementalDetokenizer::strip_leading_space(std::string& out) {
  if (!strip_text_ || out.empty()) return;
  if (out.front() == ' ') out.erase(0, 1);
  strip_text_ = false;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  drain_pending(out, /*end_of_run=*/true);
  strip_leading_space(out);
  text_ += out;
  return out;
}

}  // namespace llmk
