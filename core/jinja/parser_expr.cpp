// The Jinja parser's expressions (parser_impl.hpp): conditional
// expressions and tuples, then one function per precedence level from `or`
// down to unary operators, primaries, postfix access, calls and filters.
#include "core/jinja/parser.hpp"
#include "core/jinja/parser_impl.hpp"

namespace llmk::jinja::detail {

// An expression, or several separated by commas (a tuple, held as a list).
ExprPtr Parser::parse_tuple(bool with_condition) {
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

ExprPtr Parser::parse_expression(bool with_condition) {
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

ExprPtr Parser::binary(std::string op, ExprPtr left, ExprPtr right, const Token& at) {
  auto b = node<Expr>(Expr::Kind::binary, at);
  b->name = std::move(op);
  b->operands.push_back(std::move(left));
  b->operands.push_back(std::move(right));
  return seal(std::move(b));
}

template <class Operand, class IsOp>
ExprPtr Parser::left_assoc(Operand operand, IsOp is_op) {
  ExprPtr left = operand();
  while (is_op()) {
    const Token& at = advance();
    left = binary(at.value, std::move(left), operand(), at);
  }
  return left;
}

template <class Item>
void Parser::comma_items(std::string_view close, Item item) {
  bool first = true;
  while (!at_op(close)) {
    if (!first) {
      expect_op(",");
      if (at_op(close)) break;
    }
    first = false;
    item();
  }
  advance();
}

ExprPtr Parser::parse_or() { return left_assoc([this] { return parse_and(); }, [this] { return at_name("or"); }); }

ExprPtr Parser::parse_and() { return left_assoc([this] { return parse_not(); }, [this] { return at_name("and"); }); }

ExprPtr Parser::parse_not() {
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

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_math1() { return left_assoc([this] { return parse_concat(); }, [this] { return at_op("+") || at_op("-"); }); }

ExprPtr Parser::parse_concat() { return left_assoc([this] { return parse_math2(); }, [this] { return at_op("~"); }); }

ExprPtr Parser::parse_math2() { return left_assoc([this] { return parse_pow(); }, [this] { return at_op("*") || at_op("/") || at_op("//") || at_op("%"); }); }

ExprPtr Parser::parse_pow() { return left_assoc([this] { return parse_unary(true); }, [this] { return at_op("**"); }); }

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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
        comma_items("]", [&] { list->operands.push_back(parse_expression(true)); });
        return seal(std::move(list));
      }
      if (t.value == "{") {
        advance();
        auto dict = node<Expr>(Expr::Kind::dict, t);
        comma_items("}", [&] {
          dict->operands.push_back(parse_expression(true));
          expect_op(":");
          dict->operands.push_back(parse_expression(true));
        });
        return seal(std::move(dict));
      }
      break;
    default: break;
  }
  fail("expected an expression, found " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr value) {
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
      value = parse_call(std::move(value), at);
    } else {
      return value;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr value, const Token& at) {
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

ExprPtr Parser::parse_call(ExprPtr callee, const Token& at) {
  auto c = node<Expr>(Expr::Kind::call, at);
  c->operands.push_back(std::move(callee));
  c->args = parse_call_args();
  return seal(std::move(c));
}

CallArgs Parser::parse_call_args() {
  expect_op("(");
  CallArgs args;
  comma_items(")", [&] {
    if (cur().kind == TK::name && peek().kind == TK::op && peek().value == "=") {
      std::string key = advance().value;
      advance();
      args.keywords.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (at_op("*") || at_op("**")) unsupported("'*' and '**' argument unpacking", cur());
      if (!args.keywords.empty()) fail("a positional argument follows a keyword argument");
      args.positional.push_back(parse_expression(true));
    }
  });
  return args;
}

ExprPtr Parser::parse_filter_expr(ExprPtr value) {
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
      value = parse_call(std::move(value), cur());
    } else {
      return value;
    }
  }
}

}  // namespace llmk::jinja::detail
