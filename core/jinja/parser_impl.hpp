// The Jinja parser's state (internal to core/jinja/): recursive descent
// over the lexer's tokens. The token cursor, the error helpers and node
// construction are here; statements are parsed in parser.cpp, expressions
// in parser_expr.cpp.
#pragma once

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/jinja/ast.hpp"
#include "core/jinja/lexer.hpp"
#include "core/jinja/limits.hpp"

namespace llmk::jinja::detail {

using TK = Token::Kind;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body parse_template() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  const Token& advance() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool at_op(std::string_view op) const { return cur().kind == TK::op && cur().value == op; }
  bool at_name(std::string_view name) const { return cur().kind == TK::name && cur().value == name; }

  static std::string where(const Token& t) {
    return " at line " + std::to_string(t.line) + ", column " + std::to_string(t.column);
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::invalid_argument, "jinja: " + what + where(cur()));
  }
  [[noreturn]] void unsupported(const std::string& construct, const Token& at) const {
    throw Error(ErrorCode::unsupported,
                "jinja: unsupported construct " + construct + where(at) + " (outside llmk's Jinja subset)");
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TK::text: return "text";
      case TK::var_begin: return "'{{'";
      case TK::var_end: return "'}}'";
      case TK::block_begin: return "'{%'";
      case TK::block_end: return "'%}'";
      case TK::eof: return "end of template";
      case TK::string: return "string literal";
      default: return "'" + t.value + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!at_op(op)) fail("expected '" + std::string(op) + "', found " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().kind != TK::name) fail("expected a name, found " + describe(cur()));
    return advance().value;
  }
  void expect_block_end() {
    if (cur().kind != TK::block_end) fail("expected '%}', found " + describe(cur()));
    advance();
  }

  template <typename T>
  static std::unique_ptr<T> node(typename T::Kind kind, const Token& at) {
    auto n = std::make_unique<T>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // Sets e's depth from its children's (already sealed) and bounds it by
  // kMaxNesting: rendering walks the tree recursively, and a chain such as
  // 1+1+...+1 is as deep as it is long.
  ExprPtr seal(ExprPtr e) const {
    int below = 0;
    for (const auto& op : e->operands) {
      if (op) below = std::max(below, op->depth);
    }
    for (const auto& op : e->args.positional) below = std::max(below, op->depth);
    for (const auto& [k, op] : e->args.keywords) below = std::max(below, op->depth);
    e->depth = below + 1;
    if (e->depth > kMaxNesting) {
      fail("expression nested over " + std::to_string(kMaxNesting) + " levels deep, the limit");
    }
    return e;
  }

  // Bounds the parser's recursion (parentheses, brackets, unary operators,
  // statements inside statements) by kMaxNesting.
  struct Nest {
    explicit Nest(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting) {
        parser.fail("template nested over " + std::to_string(kMaxNesting) + " levels deep, the limit");
      }
    }
    ~Nest() { --parser.nesting_; }
    Parser& parser;
  };

  // Statements (parser.cpp). parse_body: statements until one of `end_tags`
  // opens a block (its name is left in `end_tag`, the tag's tokens after the
  // name are not consumed).
  Body parse_body(const std::set<std::string>& end_tags, std::string& end_tag);
  void parse_statement(const std::string& name, const Token& at, Body& body);
  StmtPtr parse_if(const Token& at);
  StmtPtr parse_for(const Token& at);
  StmtPtr parse_set(const Token& at);
  StmtPtr parse_macro(const Token& at);

  // Expressions (parser_expr.cpp), loosest binding first. parse_tuple: an
  // expression, or several separated by commas (a tuple, held as a list).
  ExprPtr parse_tuple(bool with_condition);
  ExprPtr parse_expression(bool with_condition);
  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, const Token& at);
  // One left-associative precedence level: `operand` between the operators
  // `is_op` accepts at the cursor (the operator's text names the node).
  template <class Operand, class IsOp>
  ExprPtr left_assoc(Operand operand, IsOp is_op);
  // Items parsed by `item` up to the operator `close` (consumed), separated
  // by commas, a trailing comma allowed.
  template <class Item>
  void comma_items(std::string_view close, Item item);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr value);
  ExprPtr parse_subscript(ExprPtr value, const Token& at);
  // callee(...) at `at`, the arguments' '(' at the cursor.
  ExprPtr parse_call(ExprPtr callee, const Token& at);
  CallArgs parse_call_args();
  ExprPtr parse_filter_expr(ExprPtr value);

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;  // Nest guards alive
};

}  // namespace llmk::jinja::detail
