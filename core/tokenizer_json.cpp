// Encoding and decoding with a parsed tokenizer.json, step for step as
// Hugging Face's `tokenizers` does: added tokens, normalizer, pre-tokenizer,
// BPE, post-processor; decoders.
#include "core/tokenizer_json.hpp"

#include <algorithm>
#include <cctype>
#include <array>

#include "core/bpe_model.hpp"
#include "core/error.hpp"
#include "core/tokenizer_json_spec.hpp"

namespace llmk::detail {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Unicode White_Space, as Rust's char::is_whitespace.
bool is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// "<0xNN>" -> the byte, else -1 (Hugging Face's ByteFallback decoder).
int byte_token_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int v = 0;
  for (char c : token.substr(3, 2)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  size_t start = 0, hit;
  while ((hit = text.find(pattern, start)) != std::string_view::npos) {
    out.append(text, start, hit - start);
    out.append(content);
    start = hit + pattern.size();
  }
  out.append(text, start);
  return out;
}

// Byte-level decoding of one token: the bytes its characters stand for, or
// its own UTF-8 when one character is outside the alphabet.
std::string byte_level_bytes(std::string_view token) {
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    const int b = ByteLevelAlphabet::byte_of(next_code_point(token, i));
    if (b < 0) return std::string(token);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

// Added tokens found in a text, leftmost-longest, with Hugging Face's
// single_word, lstrip and rstrip rules.
class AddedTokenMatcher {
 public:
  void add(const AddedTokenSpec* token) {
    by_first_byte_[static_cast<unsigned char>(token->content[0])].push_back(token);
    auto& list = by_first_byte_[static_cast<unsigned char>(token->content[0])];
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedTokenSpec* a, const AddedTokenSpec* b) { return a->content.size() > b->content.size(); });
  }
  bool empty() const {
    return std::all_of(by_first_byte_.begin(), by_first_byte_.end(), [](const auto& l) { return l.empty(); });
  }

  // Calls on_text(begin, end) for the stretches between tokens and
  // on_token(id) for each token, in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText on_text, OnToken on_token) const {
    size_t emitted = 0, pos = 0;
    while (pos < text.size()) {
      const AddedTokenSpec* hit = nullptr;
      for (const AddedTokenSpec* t : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
        if (text.compare(pos, t->content.size(), t->content) == 0) {
          hit = t;
          break;
        }
      }
      if (hit == nullptr) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + hit->content.size();
      pos = stop;  // a discarded match is still consumed, as in an Aho-Corasick scan
      if (hit->single_word && (word_char_before(text, start) || word_char_after(text, stop))) continue;
      if (hit->lstrip) {
        size_t s = start;
        while (s > emitted) {
          size_t b = s - 1;
          while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
          size_t k = b;
          if (!is_whitespace(next_code_point(text, k))) break;
          s = b;
        }
        start = s;
      }
      if (hit->rstrip) {
        while (stop < text.size()) {
          size_t k = stop;
          if (!is_whitespace(next_code_point(text, k))) break;
          stop = k;
        }
        pos = stop;
      }
      if (emitted < start) on_text(emitted, start);
      on_token(hit->id);
      emitted = stop;
    }
    if (emitted < text.size()) on_text(emitted, text.size());
  }

 private:
  // A word character as Hugging Face's single_word sees it (a regex \w):
  // alphabetic, a mark, a decimal digit, a connector such as '_', or a
  // joiner. `ch` is one character.
  static bool is_word_char(std::string_view ch) {
    const auto c = static_cast<unsigned char>(ch[0]);
    if (c < 0x80) return std::isalnum(c) != 0 || c == '_';
    static const UnicodeRegex word(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])");
    std::vector<std::pair<size_t, size_t>> hits;
    word.find_all(ch, hits);
    return !hits.empty();
  }
  static bool word_char_before(std::string_view text, size_t at) {
    if (at == 0) return false;
    size_t b = at - 1;
    while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
    return is_word_char(text.substr(b, at - b));
  }
  static bool word_char_after(std::string_view text, size_t at) {
    if (at >= text.size()) return false;
    size_t e = at;
    next_code_point(text, e);
    return is_word_char(text.substr(at, e - at));
  }

  std::array<std::vector<const AddedTokenSpec*>, 256> by_first_byte_;
};

class TokenizerJsonBackend final : public TokenizerBackend {
 public:
  explicit TokenizerJsonBackend(const std::filesystem::path& file)
      : TokenizerJsonBackend(read_tokenizer_json(file), file.string()) {}

  // `where` names the source in errors (a file, or a GGUF file's metadata).
  TokenizerJsonBackend(TokenizerJsonSpec spec, const std::string& where)
      : spec_(std::move(spec)), bpe_(std::move(spec_.vocab), spec_.merges, spec_.bpe, where + ": /model") {
    spec_.merges.clear();
    spec_.merges.shrink_to_fit();
    build_table(where);
    // A normalized added token is looked for in its normalized form, as
    // Hugging Face does (Prepend and Replace change what it looks like).
    normalized_added_.reserve(spec_.added_tokens.size());
    for (const auto& a : spec_.added_tokens) {
      if (!a.normalized) {
        raw_matcher_.add(&a);
        continue;
      }
      AddedTokenSpec n = a;
      n.content = normalize(a.content);
      if (!n.content.empty()) normalized_added_.push_back(std::move(n));
    }
    for (const auto& n : normalized_added_) normalized_matcher_.add(&n);
  }

  std::vector<int32_t> encode(std::string_view input) const override {
    // Text with invalid UTF-8 is read as Python reads bytes with errors="replace".
    std::string sanitized;
    std::string_view text = input;
    if (!is_valid_utf8(input)) {
      sanitized = utf8_lossy(input);
      text = sanitized;
    }
    std::vector<int32_t> ids;
    raw_matcher_.split(
        text, [&](size_t b, size_t e) { encode_segment(text.substr(b, e - b), b == 0, ids); },
        [&](int32_t id) { ids.push_back(id); });
    return ids;
  }

  void add_special_tokens(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), spec_.template_prefix.begin(), spec_.template_prefix.end());
    ids.insert(ids.end(), spec_.template_suffix.begin(), spec_.template_suffix.end());
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (table_.kinds[id] != Tokenizer::PieceKind::control) tokens.push_back(contents_[id]);
    }
    for (const DecoderStep& step : spec_.decoder) tokens = run_decoder(step, std::move(tokens));
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }

  const PieceTable& table() const override { return table_; }

 private:
  // `at_start`: the segment begins the text (Metaspace's prepend_scheme "first").
  void encode_segment(std::string_view segment, bool at_start, std::vector<int32_t>& ids) const {
    const std::string normalized = normalize(segment);
    normalized_matcher_.split(
        normalized,
        [&](size_t b, size_t e) {
          pre_tokenize_and_encode(std::string_view(normalized).substr(b, e - b), at_start && b == 0, ids);
        },
        [&](int32_t id) { ids.push_back(id); });
  }

  std::string normalize(std::string_view segment) const {
    std::string text(segment);
    for (const NormalizerStep& step : spec_.normalizer) {
      switch (step.kind) {
        case NormalizerStep::Kind::unicode:
          text = normalize_unicode(text, step.form);
          break;
        case NormalizerStep::Kind::prepend:
          if (!text.empty()) text.insert(0, step.text);
          break;
        case NormalizerStep::Kind::replace:
          if (step.regex) {
            std::vector<std::pair<size_t, size_t>> hits;
            step.regex->find_all(text, hits);
            std::string out;
            size_t last = 0;
            for (auto [b, e] : hits) out.append(text, last, b - last).append(step.content), last = e;
            text = out.append(text, last);
          } else {
            text = replace_all(text, step.text, step.content);
          }
          break;
      }
    }
    return text;
  }

  struct Piece {
    std::string text;
    bool at_start;  // begins the text
  };

  void pre_tokenize_and_encode(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
    std::vector<Piece> pieces{Piece{std::string(text), at_start}};
    std::vector<std::pair<size_t, size_t>> hits;
    for (const PreTokenizerStep& step : spec_.pre_tokenizer) {
      std::vector<Piece> next;
      for (Piece& piece : pieces) {
        const std::string& t = piece.text;
        // The pieces a split makes; only the first can begin the text.
        const size_t first = next.size();
        auto emit_at = [&](const std::string& from, size_t b, size_t e) {
          next.push_back(Piece{from.substr(b, e - b), piece.at_start && next.size() == first});
        };
        if (step.kind == PreTokenizerStep::Kind::metaspace) {
          std::string m = replace_all(t, " ", step.literal);
          const bool prepend = step.prepend == PrependScheme::always ||
                               (step.prepend == PrependScheme::first && piece.at_start);
          if (prepend && m.compare(0, step.literal.size(), step.literal) != 0) m.insert(0, step.literal);
          if (!step.split) {
            next.push_back(Piece{std::move(m), piece.at_start});
            continue;
          }
          // Each replacement character starts a piece (merged with what follows).
          size_t begin = 0;
          for (size_t hit = m.find(step.literal, 1); hit != std::string::npos;
               hit = m.find(step.literal, hit + step.literal.size())) {
            emit_at(m, begin, hit);
            begin = hit;
          }
          emit_at(m, begin, m.size());
        } else if (step.regex) {
          // Isolated: every match and every stretch between matches is a piece.
          hits.clear();
          step.regex->find_all(t, hits);
          size_t last = 0;
          for (auto [b, e] : hits) {
            if (b > last) emit_at(t, last, b);
            emit_at(t, b, e);
            last = e;
          }
          if (last < t.size()) emit_at(t, last, t.size());
        } else if (step.kind == PreTokenizerStep::Kind::split) {
          size_t last = 0, hit;
          while ((hit = t.find(step.literal, last)) != std::string::npos) {
            if (hit > last) emit_at(t, last, hit);
            emit_at(t, hit, hit + step.literal.size());
            last = hit + step.literal.size();
          }
          if (last < t.size()) emit_at(t, last, t.size());
        } else {
          next.push_back(std::move(piece));
        }
      }
      if (step.kind == PreTokenizerStep::Kind::byte_level) {
        const auto& alphabet = ByteLevelAlphabet::get();
        for (Piece& piece : next) {
          std::string mapped;
          mapped.reserve(piece.text.size() * 2);
          for (char c : piece.text) mapped += alphabet.utf8_of_byte[static_cast<unsigned char>(c)];
          piece.text = std::move(mapped);
        }
      }
      pieces = std::move(next);
    }
    for (const Piece& piece : pieces) bpe_.tokenize(piece.text, ids);
  }

  std::vector<std::string> run_decoder(const DecoderStep& step, std::vector<std::string> tokens) const {
    switch (step.kind) {
      case DecoderStep::Kind::byte_level: {
        std::string bytes;
        for (const auto& t : tokens) bytes += byte_level_bytes(t);
        return {utf8_lossy(bytes)};
      }
      case DecoderStep::Kind::replace:
        for (auto& t : tokens) t = replace_all(t, step.pattern, step.content);
        return tokens;
      case DecoderStep::Kind::metaspace:
        // The first token loses every replacement character unless the
        // pre-tokenizer never prepends one; elsewhere each is a space.
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], step.pattern,
                                  i == 0 && step.prepend != PrependScheme::never ? "" : step.content);
        return tokens;
      case DecoderStep::Kind::byte_fallback: {
        std::vector<std::string> out;
        std::string run;
        auto end_run = [&] {
          if (run.empty()) return;
          if (is_valid_utf8(run)) {
            out.push_back(run);
          } else {
            for (size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacement);
          }
          run.clear();
        };
        for (auto& t : tokens) {
          const int b = byte_token_value(t);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
          } else {
            end_run();
            out.push_back(std::move(t));
          }
        }
        end_run();
        return out;
      }
      case DecoderStep::Kind::fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        return {all};
      }
      case DecoderStep::Kind::strip:
        for (auto& t : tokens) {
          int n = 0;
          while (n < step.strip_start && static_cast<size_t>(n) < t.size() && t[n] == step.content[0]) ++n;
          t.erase(0, static_cast<size_t>(n));
        }
        return tokens;
    }
    return tokens;
  }

  // Fills table_ and contents_ from the vocabulary, the added tokens and the
  // decoder, so that the streaming detokenizer reproduces decode().
  void build_table(const std::string& file) {
    int32_t size = 0;
    for (const auto& [token, id] : bpe_.vocab()) size = std::max(size, id + 1);
    for (const auto& a : spec_.added_tokens) size = std::max(size, a.id + 1);
    contents_.assign(size, std::string());
    // Ids neither the vocabulary nor the added tokens name decode to nothing.
    table_.kinds.assign(size, Tokenizer::PieceKind::control);
    table_.surfaces.assign(size, std::string());
    table_.pieces.assign(size, std::string());
    std::vector<bool> named(size, false);
    for (const auto& [token, id] : bpe_.vocab()) contents_[id] = token, named[id] = true;
    // A normalized added token decodes as its normalized text, as in
    // Hugging Face (where a special one whose text the normalizer changes is
    // then no longer recognised as special, and shows).
    for (const auto& a : spec_.added_tokens)
      contents_[a.id] = a.normalized ? normalize(a.content) : a.content, named[a.id] = true;

    const bool byte_level = spec_.decoder.front().kind == DecoderStep::Kind::byte_level;
    bool byte_fallback = false, strip = false, drop_first = false;
    std::string space_symbol;  // what decodes as ' ' (Replace or Metaspace)
    for (const auto& s : spec_.decoder) {
      if (s.kind == DecoderStep::Kind::replace || s.kind == DecoderStep::Kind::metaspace) space_symbol = s.pattern;
      drop_first = drop_first || (s.kind == DecoderStep::Kind::metaspace && s.prepend != PrependScheme::never);
      byte_fallback = byte_fallback || s.kind == DecoderStep::Kind::byte_fallback;
      strip = strip || s.kind == DecoderStep::Kind::strip;
    }
    if (drop_first) table_.first_surfaces.assign(size, std::string());
    for (int32_t id = 0; id < size; ++id) {
      if (!named[id]) continue;
      const std::string& c = contents_[id];
      if (byte_level) {
        table_.kinds[id] = Tokenizer::PieceKind::byte;
        table_.surfaces[id] = byte_level_bytes(c);
      } else if (const int b = byte_token_value(c); byte_fallback && b >= 0) {
        table_.kinds[id] = Tokenizer::PieceKind::byte;
        table_.surfaces[id] = std::string(1, static_cast<char>(b));
      } else {
        table_.kinds[id] = Tokenizer::PieceKind::normal;
        table_.surfaces[id] = space_symbol.empty() ? c : replace_all(c, space_symbol, " ");
        if (drop_first) table_.first_surfaces[id] = replace_all(c, space_symbol, "");
      }
      table_.pieces[id] = table_.surfaces[id];
    }
    for (const auto& a : spec_.added_tokens) {
      if (!a.special || contents_[a.id] != a.content) continue;
      table_.kinds[a.id] = Tokenizer::PieceKind::control;
      table_.surfaces[a.id].clear();
      table_.pieces[a.id] = a.content;
    }
    if (byte_level) {
      table_.rules = {Tokenizer::ByteErrors::lossy, false, Tokenizer::LeadingSpace::keep};
    } else {
      table_.rules = {Tokenizer::ByteErrors::whole_run, false,
                      strip        ? Tokenizer::LeadingSpace::strip_text
                      : drop_first ? Tokenizer::LeadingSpace::first_token_unspaced
                                   : Tokenizer::LeadingSpace::keep};
    }
    table_.bos_id = spec_.bos_id.value_or(spec_.template_prefix.empty() ? -1 : spec_.template_prefix.front());
    table_.eos_id = spec_.eos_id.value_or(-1);
    for (int32_t id : spec_.template_prefix) check_id(file, id, size);
    for (int32_t id : spec_.template_suffix) check_id(file, id, size);
  }

  static void check_id(const std::string& file, int32_t id, int32_t size) {
    if (id >= size)
      throw Error(ErrorCode::bad_checkpoint, file + ": /post_processor: token id " + std::to_string(id) +
                                                 " is outside the vocabulary of " + std::to_string(size));
  }

  TokenizerJsonSpec spec_;
  BpeModel bpe_;
  PieceTable table_;
  std::vector<std::string> contents_;  // [vocab_size] the token's text as written in the file
  std::vector<AddedTokenSpec> normalized_added_;  // added tokens with normalized: true, content normalized
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized: false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized: true
};

}  // namespace

std::unique_ptr<TokenizerBackend> make_tokenizer_json_backend(const std::filesystem::path& json_file) {
  return std::make_unique<TokenizerJsonBackend>(json_file);
}

std::unique_ptr<TokenizerBackend> make_tokenizer_json_backend(TokenizerJsonSpec spec, const std::string& where) {
  return std::make_unique<TokenizerJsonBackend>(std::move(spec), where);
}

}  // namespace llmk::detail
