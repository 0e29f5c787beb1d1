#include "core/jinja/lexer.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace llmk::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    bool line_starting = true;  // the previous match ended with a newline
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string data = src_.substr(pos_, (tag == std::string::npos ? src_.size() : tag) - pos_);
      if (tag == std::string::npos) {
        emit_text(std::move(data), pos_);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        while (!data.empty() && is_space(data.back())) data.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: whitespace alone between a line start and {% or {#.
        const size_t newline = data.rfind('\n');
        const size_t l_pos = newline == std::string::npos ? 0 : newline + 1;
        if ((l_pos > 0 || line_starting) && l_pos < data.size() &&
            std::all_of(data.begin() + static_cast<std::ptrdiff_t>(l_pos), data.end(), is_space)) {
          data.resize(l_pos);
        }
      }
      emit_text(std::move(data), pos_);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = skip_comment(tag);
      } else {
        line_starting = lex_tag(kind == '{', tag);
      }
    }
    tokens_.push_back({Token::Kind::eof, "", line_of(src_.size()), column_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw Error(ErrorCode::invalid_argument, "jinja: " + what + " at line " + std::to_string(line_of(at)) +
                                                 ", column " + std::to_string(column_of(at)));
  }

  int line_of(size_t at) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - line_starts_.begin());
  }
  int column_of(size_t at) const { return static_cast<int>(at - line_starts_[static_cast<size_t>(line_of(at) - 1)]) + 1; }

  void emit_text(std::string data, size_t at) {
    if (!data.empty()) tokens_.push_back({Token::Kind::text, std::move(data), line_of(at), column_of(at)});
  }

  void push(Token::Kind kind, std::string value, size_t at) {
    tokens_.push_back({kind, std::move(value), line_of(at), column_of(at)});
  }

  // After the end marker of a tag or comment: a `-` marker eats the
  // whitespace that follows; a plain block or comment end eats one newline
  // (trim_blocks). Returns whether what was consumed ends with a newline.
  bool finish_tag(bool strip, bool trim_newline) {
    bool ended_with_newline = false;
    if (strip) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ended_with_newline = src_[pos_++] == '\n';
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ended_with_newline = true;
    }
    return ended_with_newline;
  }

  bool skip_comment(size_t start) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(start, "unclosed comment");
    const char before = end > pos_ ? src_[end - 1] : '\0';
    pos_ = end + 2;
    return finish_tag(before == '-', before != '+');
  }

  // Lexes the inside of {{ }} or {% %} from pos_ through its end marker.
  bool lex_tag(bool is_var, size_t start) {
    push(is_var ? Token::Kind::var_begin : Token::Kind::block_begin, "", start);
    const char closer = is_var ? '}' : '%';
    int depth = 0;  // open brackets: an end marker inside them is not one
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) fail(start, is_var ? "unclosed '{{'" : "unclosed '{%'");
      const char c = src_[pos_];
      if (depth == 0) {
        const bool marked = (c == '-' || c == '+') && src_.compare(pos_ + 1, 2, std::string{closer, '}'}) == 0;
        if (marked || src_.compare(pos_, 2, std::string{closer, '}'}) == 0) {
          push(is_var ? Token::Kind::var_end : Token::Kind::block_end, "", pos_);
          pos_ += marked ? 3 : 2;
          return finish_tag(marked && c == '-', !is_var && !(marked && c == '+'));
        }
      }
      const size_t at = pos_;
      if (c == '\'' || c == '"') {
        push(Token::Kind::string, lex_string(), at);
      } else if (is_digit(c)) {
        lex_number(at);
      } else if (is_name_start(c)) {
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        push(Token::Kind::name, src_.substr(at, pos_ - at), at);
      } else {
        static const char* const two_char[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two_char) {
          if (src_.compare(pos_, 2, t) == 0) op = t;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) == std::string_view::npos) {
            fail(at, std::string("unexpected character '") + c + "'");
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        pos_ += op.size();
        push(Token::Kind::op, op, at);
      }
    }
  }

  void lex_number(size_t at) {
    while (pos_ < src_.size() && (is_digit(src_[pos_]) || src_[pos_] == '_')) ++pos_;
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      while (pos_ < src_.size() && (is_digit(src_[pos_]) || src_[pos_] == '_')) ++pos_;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && is_digit(src_[p])) {
        is_float = true;
        pos_ = p;
        while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
      }
    }
    std::string text = src_.substr(at, pos_ - at);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    push(is_float ? Token::Kind::floating : Token::Kind::integer, text, at);
  }

  // A quoted literal with Python's escapes (\n \t \r \\ \' \" \xHH \uHHHH
  // \UHHHHHHHH \a \b \f \v \0); an unknown escape keeps its backslash.
  std::string lex_string() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) fail(start, "unclosed string literal");
      const char c = src_[pos_++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) fail(start, "unclosed string literal");
      const char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) fail(start, "truncated \\" + std::string(1, e) + " escape");
          const std::string hex = src_.substr(pos_, n);
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
            fail(pos_, "bad \\" + std::string(1, e) + " escape");
          }
          append_utf8(out, static_cast<uint32_t>(std::stoul(hex, nullptr, 16)));
          pos_ += n;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
  }

  std::string src_;
  std::vector<size_t> line_starts_;  // offset of each line's first character
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  // As jinja2: every newline form becomes "\n", and one trailing newline
  // is dropped (keep_trailing_newline=False).
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text += source[i];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return Lexer(std::move(text)).run();
}

}  // namespace llmk::jinja
