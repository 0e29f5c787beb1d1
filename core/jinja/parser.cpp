#include "core/jinja/parser.hpp"

#include <algorithm>
#include <set>

#include "core/error.hpp"
#include "core/jinja/limits.hpp"

namespace llmk::jinja {
namespace {

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

  // Statements until one of `end_tags` opens a block (its name is left in
  // `end_tag`, the tag's tokens after the name are not consumed).
  Body parse_body(const std::set<std::string>& end_tags, std::string& end_tag) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TK::eof) {
        for (const auto& tag : end_tags) {
          if (tag.rfind("end", 0) == 0) fail("missing {% " + tag + " %}");
        }
        return body;
      }
      if (t.kind == TK::text) {
        auto s = node<Stmt>(Stmt::Kind::text, t);
        s->text = t.value;
        body.push_back(std::move(s));
        advance();
      } else if (t.kind == TK::var_begin) {
        advance();
        auto s = node<Stmt>(Stmt::Kind::print, t);
        s->expr = parse_tuple(true);
        if (cur().kind != TK::var_end) fail("expected '}}', found " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.kind == TK::block_begin) {
        advance();
        const Token& name_token = cur();
        const std::string name = expect_name();
        if (end_tags.count(name)) {
          end_tag = name;
          return body;
        }
        parse_statement(name, name_token, body);
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  void parse_statement(const std::string& name, const Token& at, Body& body) {
    const Nest nest(*this);
    if (name == "if") {
      body.push_back(parse_if(at));
    } else if (name == "for") {
      body.push_back(parse_for(at));
    } else if (name == "set") {
      body.push_back(parse_set(at));
    } else if (name == "macro") {
      body.push_back(parse_macro(at));
    } else if (name == "break" || name == "continue") {
      expect_block_end();
      body.push_back(node<Stmt>(name == "break" ? Stmt::Kind::loop_break : Stmt::Kind::loop_continue, at));
    } else if (name == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      expect_block_end();
      std::string end;
      Body inner = parse_body({"endgeneration"}, end);
      expect_block_end();
      for (auto& s : inner) body.push_back(std::move(s));
    } else if (name == "elif" || name == "else" || name.rfind("end", 0) == 0) {
      fail("unexpected {% " + name + " %}");
    } else {
      unsupported("'{% " + name + " %}'", at);
    }
  }

  StmtPtr parse_if(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::if_chain, at);
    ExprPtr condition = parse_tuple(true);
    expect_block_end();
    while (true) {
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, end);
      s->branches.emplace_back(std::move(condition), std::move(body));
      if (end == "endif") break;
      if (end == "else") {
        expect_block_end();
        Body else_body = parse_body({"endif"}, end);
        s->branches.emplace_back(nullptr, std::move(else_body));
        break;
      }
      condition = parse_tuple(true);
      expect_block_end();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_for(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::for_loop, at);
    s->targets.push_back(expect_name());
    while (at_op(",")) {
      advance();
      s->targets.push_back(expect_name());
    }
    if (!at_name("in")) fail("expected 'in' in for loop, found " + describe(cur()));
    advance();
    s->expr = parse_tuple(false);
    if (at_name("if")) {
      advance();
      s->filter = parse_expression(true);
    }
    if (at_name("recursive")) unsupported("'recursive' loops", cur());
    expect_block_end();
    std::string end;
    s->body = parse_body({"else", "endfor"}, end);
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::set, at);
    s->targets.push_back(expect_name());
    if (at_op(".")) {
      advance();
      s->attribute = expect_name();
    } else {
      while (at_op(",")) {
        advance();
        s->targets.push_back(expect_name());
      }
    }
    if (cur().kind == TK::block_end && s->targets.size() == 1 && s->attribute.empty()) {
      advance();
      s->kind = Stmt::Kind::set_block;
      std::string end;
      s->body = parse_body({"endset"}, end);
      expect_block_end();
      return s;
    }
    expect_op("=");
    s->expr = parse_tuple(true);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::macro, at);
    s->name = expect_name();
    expect_op("(");
    while (!at_op(")")) {
      if (!s->params.empty()) expect_op(",");
      std::string param = expect_name();
      ExprPtr default_value;
      if (at_op("=")) {
        advance();
        default_value = parse_expression(true);
      }
      s->params.emplace_back(std::move(param), std::move(default_value));
    }
    advance();
    expect_block_end();
    std::string end;
    s->body = parse_body({"endmacro"}, end);
    if (cur().kind == TK::name) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // An expression, or several separated by commas (a tuple, held as a list).
  ExprPtr parse_tuple(bool with_condition) {
    const Token& at = cur();
    ExprPtr first = parse_expression(with_condition);
    if (!at_op(",")) return first;
    auto list = node<Expr>(Expr::Kind::list, at);
    list->operands.push_back(std::move(first));
    while (at_op(",")) {
      advance();
      if (cur().kind == TK::block_end || cur().kind == TK::var_end || at_op(")")) break;
      list->operands.push_back(parse_expression(with_condition));
    }
    return seal(std::move(list));
  }

  ExprPtr parse_expression(bool with_condition) {
    if (!with_condition) return parse_or();
    const Token& at = cur();
    ExprPtr value = parse_or();
    while (at_name("if")) {
      advance();
      auto c = node<Expr>(Expr::Kind::condition, at);
      c->operands.push_back(std::move(value));
      c->operands.push_back(parse_or());
      if (at_name("else")) {
        advance();
        c->operands.push_back(parse_expression(true));
      } else {
        c->operands.push_back(nullptr);
      }
      value = seal(std::move(c));
    }
    return value;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, const Token& at) {
    auto b = node<Expr>(Expr::Kind::binary, at);
    b->name = std::move(op);
    b->operands.push_back(std::move(left));
    b->operands.push_back(std::move(right));
    return seal(std::move(b));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const Token& at = advance();
      left = binary("or", std::move(left), parse_and(), at);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const Token& at = advance();
      left = binary("and", std::move(left), parse_not(), at);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const Nest nest(*this);
      const Token& at = advance();
      auto u = node<Expr>(Expr::Kind::unary, at);
      u->name = "not";
      u->operands.push_back(parse_not());
      return seal(std::move(u));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr left = parse_math1();
    ExprPtr chain;
    while (true) {
      std::string op;
      if (cur().kind == TK::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                   cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = advance().value;
      } else if (at_name("in")) {
        advance();
        op = "in";
      } else if (at_name("not") && peek().kind == TK::name && peek().value == "in") {
        advance();
        advance();
        op = "not in";
      } else {
        break;
      }
      if (!chain) {
        chain = node<Expr>(Expr::Kind::compare, at);
        chain->operands.push_back(std::move(left));
      }
      chain->ops.push_back(op);
      chain->operands.push_back(parse_math1());
    }
    return chain ? seal(std::move(chain)) : std::move(left);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& at = advance();
      left = binary(at.value, std::move(left), parse_concat(), at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_op("~")) {
      const Token& at = advance();
      left = binary("~", std::move(left), parse_math2(), at);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& at = advance();
      left = binary(at.value, std::move(left), parse_pow(), at);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const Token& at = advance();
      left = binary("**", std::move(left), parse_unary(true), at);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(*this);
    ExprPtr value;
    if (at_op("-") || at_op("+")) {
      const Token& at = advance();
      auto u = node<Expr>(Expr::Kind::unary, at);
      u->name = at.value;
      u->operands.push_back(parse_unary(false));
      value = seal(std::move(u));
    } else {
      value = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(value)) : std::move(value);
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case TK::name: {
        advance();
        auto e = node<Expr>(Expr::Kind::literal, t);
        if (t.value == "true" || t.value == "True") e->value = Value(true);
        else if (t.value == "false" || t.value == "False") e->value = Value(false);
        else if (t.value == "none" || t.value == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::name;
          e->name = t.value;
        }
        return e;
      }
      case TK::string: {
        std::string text;
        while (cur().kind == TK::string) text += advance().value;  // adjacent literals join
        auto e = node<Expr>(Expr::Kind::literal, t);
        e->value = Value(std::move(text));
        return e;
      }
      case TK::integer: {
        advance();
        auto e = node<Expr>(Expr::Kind::literal, t);
        try {
          e->value = Value(static_cast<int64_t>(std::stoll(t.value)));
        } catch (const std::out_of_range&) {
          unsupported("integer literal " + t.value + " (beyond 64 bits)", t);
        }
        return e;
      }
      case TK::floating: {
        advance();
        auto e = node<Expr>(Expr::Kind::literal, t);
        try {
          e->value = Value(std::stod(t.value));
        } catch (const std::out_of_range&) {
          unsupported("float literal " + t.value + " (beyond double range)", t);
        }
        return e;
      }
      case TK::op:
        if (t.value == "(") {
          advance();
          if (at_op(")")) {  // empty tuple
            advance();
            return node<Expr>(Expr::Kind::list, t);
          }
          ExprPtr inner = parse_tuple(true);
          expect_op(")");
          return inner;
        }
        if (t.value == "[") {
          advance();
          auto list = node<Expr>(Expr::Kind::list, t);
          while (!at_op("]")) {
            if (!list->operands.empty()) {
              expect_op(",");
              if (at_op("]")) break;
            }
            list->operands.push_back(parse_expression(true));
          }
          advance();
          return seal(std::move(list));
        }
        if (t.value == "{") {
          advance();
          auto dict = node<Expr>(Expr::Kind::dict, t);
          while (!at_op("}")) {
            if (!dict->operands.empty()) {
              expect_op(",");
              if (at_op("}")) break;
            }
            dict->operands.push_back(parse_expression(true));
            expect_op(":");
            dict->operands.push_back(parse_expression(true));
          }
          advance();
          return seal(std::move(dict));
        }
        break;
      default: break;
    }
    fail("expected an expression, found " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr value) {
    while (true) {
      const Token& at = cur();
      if (at_op(".")) {
        advance();
        auto a = node<Expr>(Expr::Kind::attribute, at);
        if (cur().kind == TK::integer) {  // x.0 is x[0]
          a->kind = Expr::Kind::subscript;
          auto index = node<Expr>(Expr::Kind::literal, cur());
          const Token& digits = advance();
          try {
            index->value = Value(static_cast<int64_t>(std::stoll(digits.value)));
          } catch (const std::out_of_range&) {
            unsupported("integer index " + digits.value + " (beyond 64 bits)", digits);
          }
          a->operands.push_back(std::move(value));
          a->operands.push_back(std::move(index));
        } else {
          a->name = expect_name();
          a->operands.push_back(std::move(value));
        }
        value = seal(std::move(a));
      } else if (at_op("[")) {
        advance();
        value = seal(parse_subscript(std::move(value), at));
      } else if (at_op("(")) {
        auto c = node<Expr>(Expr::Kind::call, at);
        c->operands.push_back(std::move(value));
        c->args = parse_call_args();
        value = seal(std::move(c));
      } else {
        return value;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr value, const Token& at) {
    ExprPtr parts[3];
    int num_colons = 0;
    for (int i = 0; i < 3; ++i) {
      if (!at_op(":") && !at_op("]")) parts[i] = parse_expression(true);
      if (i < 2 && at_op(":")) {
        advance();
        ++num_colons;
      } else {
        break;
      }
    }
    expect_op("]");
    if (num_colons == 0) {
      if (!parts[0]) fail("empty subscript");
      auto s = node<Expr>(Expr::Kind::subscript, at);
      s->operands.push_back(std::move(value));
      s->operands.push_back(std::move(parts[0]));
      return s;
    }
    auto s = node<Expr>(Expr::Kind::slice, at);
    s->operands.push_back(std::move(value));
    for (auto& p : parts) s->operands.push_back(std::move(p));
    return s;
  }

  CallArgs parse_call_args() {
    expect_op("(");
    CallArgs args;
    bool first = true;
    while (!at_op(")")) {
      if (!first) {
        expect_op(",");
        if (at_op(")")) break;
      }
      first = false;
      if (cur().kind == TK::name && peek().kind == TK::op && peek().value == "=") {
        std::string key = advance().value;
        advance();
        args.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (at_op("*") || at_op("**")) unsupported("'*' and '**' argument unpacking", cur());
        if (!args.keywords.empty()) fail("a positional argument follows a keyword argument");
        args.positional.push_back(parse_expression(true));
      }
    }
    advance();
    return args;
  }

  ExprPtr parse_filter_expr(ExprPtr value) {
    while (true) {
      if (at_op("|")) {
        advance();
        const Token& at = cur();
        auto f = node<Expr>(Expr::Kind::filter, at);
        f->name = expect_name();
        while (at_op(".")) {  // dotted filter names exist in jinja; none here
          advance();
          f->name += '.';
          f->name += expect_name();
        }
        if (!is_known_filter(f->name)) unsupported("filter '" + f->name + "'", at);
        if (at_op("(")) f->args = parse_call_args();
        f->operands.push_back(std::move(value));
        value = seal(std::move(f));
      } else if (at_name("is")) {
        advance();
        auto t = node<Expr>(Expr::Kind::test, cur());
        if (at_name("not")) {
          advance();
          t->negated = true;
        }
        const Token& at = cur();
        t->name = expect_name();
        if (!is_known_test(t->name)) unsupported("test '" + t->name + "'", at);
        if (at_op("(")) {
          t->args = parse_call_args();
        } else if ((cur().kind == TK::name || cur().kind == TK::string || cur().kind == TK::integer ||
                    cur().kind == TK::floating || at_op("(") || at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
          if (at_name("is")) fail("tests cannot be chained with 'is'");
          t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        t->operands.push_back(std::move(value));
        value = seal(std::move(t));
      } else if (at_op("(")) {
        const Token& at = cur();
        auto c = node<Expr>(Expr::Kind::call, at);
        c->operands.push_back(std::move(value));
        c->args = parse_call_args();
        value = seal(std::move(c));
      } else {
        return value;
      }
    }
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;  // Nest guards alive
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace llmk::jinja
