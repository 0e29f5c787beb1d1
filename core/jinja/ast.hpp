// Syntax tree of the Jinja subset. One node type per level (Expr, Stmt)
// with a kind and the fields that kind uses, rather than a class per
// construct: the subset is small and the renderer switches on kind.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/jinja/value.hpp"

namespace llmk::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Arguments as written at a call, filter or test site.
struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // operands: elements (also tuples)
    dict,       // operands: key0, value0, key1, value1, ...
    attribute,  // operands[0].name
    subscript,  // operands[0][operands[1]]
    slice,      // operands[0][operands[1]:operands[2]:operands[3]] (each may be null)
    call,       // operands[0](args)
    filter,     // operands[0] | name(args)
    test,       // operands[0] is [not] name(args); negated
    unary,      // name ("-", "+", "not") operands[0]
    binary,     // operands[0] name operands[1]: + - * / // % ** ~ and or
    compare,    // operands[0] ops[0] operands[1] ops[1] ...: == != < <= > >= in "not in"
    condition,  // operands[0] if operands[1] else operands[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<std::string> ops;
  CallArgs args;
  bool negated = false;
  int depth = 1;  // levels of the tree under and including this node (the parser bounds it)
};

struct Stmt {
  enum class Kind {
    text,       // text
    print,      // {{ expr }}
    if_chain,   // branches: (condition, body); a null condition is the else
    for_loop,   // for targets in expr [if filter]: body [else else_body]
    set,        // set targets = expr, or set targets[0].attribute = expr
    set_block,  // set targets[0] %} body {% endset
    macro,      // macro name(params): body
    loop_break,
    loop_continue,
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;  // for `set ns.attr = ...`
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults (null: none)
};

}  // namespace llmk::jinja
