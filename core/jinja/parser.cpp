// The Jinja parser's entry and its statements (parser_impl.hpp): text,
// {{ }} and the {% %} tags of the subset (if, for, set, macro); anything
// else is refused naming the construct.
#include "core/jinja/parser.hpp"

#include "core/jinja/parser_impl.hpp"

namespace llmk::jinja {
namespace detail {

// Statements until one of `end_tags` opens a block (its name is left in
// `end_tag`, the tag's tokens after the name are not consumed).
Body Parser::parse_body(const std::set<std::string>& end_tags, std::string& end_tag) {
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

void Parser::parse_statement(const std::string& name, const Token& at, Body& body) {
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

StmtPtr Parser::parse_if(const Token& at) {
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

StmtPtr Parser::parse_for(const Token& at) {
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

StmtPtr Parser::parse_set(const Token& at) {
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

StmtPtr Parser::parse_macro(const Token& at) {
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

}  // namespace detail

Body parse(const std::vector<Token>& tokens) { return detail::Parser(tokens).parse_template(); }

}  // namespace llmk::jinja
