// The tree-walking renderer behind jinja::Template (internal to
// core/jinja/): its scopes and limits are here; statements are rendered in
// renderer.cpp, expressions evaluated in renderer_expr.cpp.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/jinja/ast.hpp"
#include "core/jinja/builtins.hpp"
#include "core/jinja/limits.hpp"

namespace llmk::jinja::detail {

// How a statement list ended: normally, or by {% break %} / {% continue %}.
enum class Flow { normal, loop_break, loop_continue };

constexpr int kMaxDepth = 200;  // macro recursion and nesting bound

inline std::string position(int line, int column) {
  return " at line " + std::to_string(line) + ", column " + std::to_string(column);
}

// Source-like text of an expression, for error messages.
inline std::string describe(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::name: return e.name;
    case Expr::Kind::attribute: return describe(*e.operands[0]) + "." + e.name;
    case Expr::Kind::subscript: return describe(*e.operands[0]) + "[" + describe(*e.operands[1]) + "]";
    case Expr::Kind::literal: return e.value.repr();
    case Expr::Kind::call: return describe(*e.operands[0]) + "(...)";
    default: return "expression";
  }
}

[[noreturn]] inline void fail_at(const Expr& e, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "jinja: " + what + position(e.line, e.column));
}

class Renderer {
 public:
  explicit Renderer(const Dict& variables) {
    Dict globals;
    add_builtin_globals(globals);
    for (const auto& [k, v] : variables.entries) globals.set(k, v);
    // namespace(), remembering each namespace made: a namespace may come to
    // hold itself (ns.x = [ns]), a cycle of shared_ptrs that only clearing
    // the namespaces when the rendering ends frees.
    const Value make_namespace = *globals.find("namespace");
    globals.set("namespace", Value(Callable{"namespace", [this, make_namespace](const Args& a) {
      count_nested_container(0, 0);
      Value ns = make_namespace.as_callable().call(a);
      namespaces_.push_back(ns);
      return ns;
    }}));
    scopes_.emplace_back();
    for (auto& [k, v] : globals.entries) scopes_.back()[k] = std::move(v);
  }

  ~Renderer() {
    for (const Value& ns : namespaces_) ns.as_dict().entries.clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string run(const Body& body) {
    std::string out;
    render_body(body, out);
    return out;
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
  }

  // The output (or a {% set %} block, or a macro's) stays within kMaxStringBytes.
  static void check_output(const std::string& out, const Stmt& s) {
    if (out.size() > kMaxStringBytes) {
      throw Error(ErrorCode::invalid_argument, "jinja: rendered text would be over " + std::to_string(kMaxStringBytes) +
                                                   " bytes, the limit" + position(s.line, s.column));
    }
  }

  static bool is_container(const Value& v) { return v.is_list() || v.is_dict(); }

  // Counts one more container built holding a container (see kMaxNestedContainers).
  void count_nested_container(int line, int column) {
    if (++num_nested_containers_ > kMaxNestedContainers) {
      throw Error(ErrorCode::invalid_argument, "jinja: rendering would build over " +
                                                   std::to_string(kMaxNestedContainers) +
                                                   " lists, dicts or namespaces nested in one another, the limit" +
                                                   position(line, column));
    }
  }

  // Adds `units` to the rendering's work (see kMaxRenderWork).
  void charge(size_t units, int line, int column) {
    work_ += units;
    if (work_ > kMaxRenderWork) {
      throw Error(ErrorCode::invalid_argument, "jinja: rendering would take over " + std::to_string(kMaxRenderWork) +
                                                   " bytes of work (values built, loop iterations), the limit" +
                                                   position(line, column));
    }
  }

  // Runs `fn`, adding the expression's position to an error that has none.
  template <typename F>
  Value at(const Expr& e, F&& fn) {
    try {
      return fn();
    } catch (const Error& err) {
      const std::string what = err.what();
      if (what.find(" at line ") != std::string::npos) throw;
      throw Error(err.code(), what + position(e.line, e.column));
    }
  }

  // Statements (renderer.cpp).
  Flow render_body(const Body& body, std::string& out);
  Flow render_stmt(const Stmt& s, std::string& out);
  void assign(const std::vector<std::string>& targets, const Value& value, int line, int column);
  void render_for(const Stmt& s, std::string& out);
  Value make_macro(const Stmt& s);

  // Expressions (renderer_expr.cpp).
  Args eval_args(const CallArgs& call_args);
  // Evaluates `e` within kMaxEvalDepth, charging the value it yields to the
  // work budget; an error gets e's position unless it has one.
  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  Value eval_binary(const Expr& e);

  std::vector<Scope> scopes_;  // [0]: globals; one more per loop iteration and macro call
  std::vector<Value> namespaces_;    // every namespace() made, cleared at the end
  size_t num_nested_containers_ = 0;  // see kMaxNestedContainers
  size_t work_ = 0;             // see kMaxRenderWork
  size_t comparisons_seen_ = num_comparisons_made();  // equals() steps already charged
  int eval_depth_ = 0;          // eval() calls under way
};

}  // namespace llmk::jinja::detail
