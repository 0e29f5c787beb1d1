// Lexer of the Jinja subset: template text to tokens, with the whitespace
// rules Hugging Face renders chat templates under (trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False) and the `-`/`+`
// markers. Comments vanish here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llmk::jinja {

struct Token {
  enum class Kind {
    text,         // template data between tags (already whitespace-controlled)
    var_begin,    // {{
    var_end,      // }}
    block_begin,  // {%
    block_end,    // %}
    name,
    string,       // value: the unescaped literal
    integer,
    floating,
    op,           // punctuation and operators: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
    eof,
  };
  Kind kind;
  std::string value;
  int line = 1;    // 1-based position of the token's first character in the source
  int column = 1;
};

// Throws Error(invalid_argument) naming line and column for an unclosed
// tag, comment or string, or a character no token starts with.
std::vector<Token> tokenize(std::string_view source);

}  // namespace llmk::jinja
