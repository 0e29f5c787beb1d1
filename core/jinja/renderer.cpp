// The tree-walking renderer behind jinja::Template.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "core/error.hpp"
#include "core/jinja/ast.hpp"
#include "core/jinja/builtins.hpp"
#include "core/jinja/lexer.hpp"
#include "core/jinja/limits.hpp"
#include "core/jinja/parser.hpp"
#include "core/jinja/template.hpp"

namespace llmk::jinja {

struct Template::Parsed {
  Body body;
};

namespace {

// How a statement list ended: normally, or by {% break %} / {% continue %}.
enum class Flow { normal, loop_break, loop_continue };

constexpr int kMaxDepth = 200;  // macro recursion and nesting bound

std::string position(int line, int column) {
  return " at line " + std::to_string(line) + ", column " + std::to_string(column);
}

// Source-like text of an expression, for error messages.
std::string describe(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::name: return e.name;
    case Expr::Kind::attribute: return describe(*e.operands[0]) + "." + e.name;
    case Expr::Kind::subscript: return describe(*e.operands[0]) + "[" + describe(*e.operands[1]) + "]";
    case Expr::Kind::literal: return e.value.repr();
    case Expr::Kind::call: return describe(*e.operands[0]) + "(...)";
    default: return "expression";
  }
}

[[noreturn]] void fail_at(const Expr& e, const std::string& what) {
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

  Flow render_body(const Body& body, std::string& out) {
    for (const auto& stmt : body) {
      const Flow flow = render_stmt(*stmt, out);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow render_stmt(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::text:
        out += s.text;
        check_output(out, s);
        return Flow::normal;
      case Stmt::Kind::print:
        out += at(*s.expr, [&] { return Value(eval(*s.expr).str()); }).as_string();
        check_output(out, s);
        return Flow::normal;
      case Stmt::Kind::if_chain:
        for (const auto& [condition, body] : s.branches) {
          if (!condition || eval(*condition).truthy()) return render_body(body, out);
        }
        return Flow::normal;
      case Stmt::Kind::for_loop: render_for(s, out); return Flow::normal;
      case Stmt::Kind::set: {
        const Value value = eval(*s.expr);
        if (!s.attribute.empty()) {
          const Value target = lookup(s.targets[0]);
          if (!target.is_dict() || !target.as_dict().is_namespace) {
            throw Error(ErrorCode::invalid_argument, "jinja: cannot assign attribute '" + s.attribute + "' of '" +
                                                         s.targets[0] + "', which is not a namespace" +
                                                         position(s.line, s.column));
          }
          if (is_container(value)) count_nested_container(s.line, s.column);
          target.as_dict().set(s.attribute, value);
        } else {
          assign(s.targets, value, s.line, s.column);
        }
        return Flow::normal;
      }
      case Stmt::Kind::set_block: {
        std::string captured;
        render_body(s.body, captured);
        scopes_.back()[s.targets[0]] = Value(std::move(captured));
        return Flow::normal;
      }
      case Stmt::Kind::macro: scopes_.back()[s.name] = make_macro(s); return Flow::normal;
      case Stmt::Kind::loop_break: return Flow::loop_break;
      case Stmt::Kind::loop_continue: return Flow::loop_continue;
    }
    return Flow::normal;
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

  void assign(const std::vector<std::string>& targets, const Value& value, int line, int column) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = value;
      return;
    }
    const List items = value.is_list() ? value.as_list() : List{};
    if (items.size() != targets.size()) {
      throw Error(ErrorCode::invalid_argument, "jinja: cannot unpack a " + value.type_name() + " into " +
                                                   std::to_string(targets.size()) + " names" + position(line, column));
    }
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
  }

  void render_for(const Stmt& s, std::string& out) {
    const Value iterable = eval(*s.expr);
    List items;
    try {
      items = iterate(iterable);
    } catch (const Error& e) {
      fail_at(*s.expr, std::string(e.what()).substr(7));
    }
    if (s.filter) {  // the `if` clause filters before `loop` is counted
      List kept;
      for (const Value& item : items) {
        charge(4096, s.line, s.column);
        scopes_.emplace_back();
        assign(s.targets, item, s.line, s.column);
        const bool keep = eval(*s.filter).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      render_body(s.else_body, out);
      return;
    }
    if (scopes_.size() > kMaxDepth) throw Error(ErrorCode::invalid_argument, "jinja: nesting too deep" + position(s.line, s.column));
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Dict loop;
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("revindex", Value(n - i));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(int64_t{1}));
      loop.set("depth0", Value(int64_t{0}));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value());
      loop.set("cycle", Value(Callable{"loop.cycle", [i](const Args& a) {
        if (a.positional.empty()) throw Error(ErrorCode::invalid_argument, "jinja: loop.cycle needs arguments");
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      }}));
      charge(4096, s.line, s.column);
      scopes_.emplace_back();
      scopes_.back()["loop"] = Value(std::move(loop));
      assign(s.targets, items[static_cast<size_t>(i)], s.line, s.column);
      const Flow flow = render_body(s.body, out);
      scopes_.pop_back();
      if (flow == Flow::loop_break) break;
    }
  }

  Value make_macro(const Stmt& s) {
    const Stmt* macro = &s;
    return Value(Callable{s.name, [this, macro](const Args& a) {
      if (scopes_.size() > kMaxDepth) {
        throw Error(ErrorCode::invalid_argument, "jinja: macro '" + macro->name + "' recursed too deep");
      }
      charge(4096, macro->line, macro->column);
      Scope frame;
      for (size_t i = 0; i < macro->params.size(); ++i) {
        const auto& [param, default_value] = macro->params[i];
        const Value* given = a.get(i, param);
        frame[param] = given ? *given : default_value ? eval(*default_value) : Value();
      }
      if (a.positional.size() > macro->params.size()) {
        throw Error(ErrorCode::invalid_argument, "jinja: macro '" + macro->name + "' takes " +
                                                     std::to_string(macro->params.size()) + " arguments");
      }
      scopes_.push_back(std::move(frame));
      std::string out;
      render_body(macro->body, out);
      scopes_.pop_back();
      return Value(std::move(out));
    }});
  }

  Args eval_args(const CallArgs& call_args) {
    Args args;
    for (const auto& p : call_args.positional) args.positional.push_back(eval(*p));
    for (const auto& [k, v] : call_args.keywords) args.keywords.emplace_back(k, eval(*v));
    return args;
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

  // Evaluates `e` within kMaxEvalDepth, charging the value it yields to the
  // work budget; an error gets e's position unless it has one.
  Value eval(const Expr& e) {
    if (eval_depth_ >= kMaxEvalDepth) {
      fail_at(e, "expressions and macro calls nested over " + std::to_string(kMaxEvalDepth) + " levels deep, the limit");
    }
    ++eval_depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{eval_depth_};
    Value v = at(e, [&] { return eval_node(e); });
    const size_t comparisons = num_comparisons_made();
    charge(16 * (comparisons - comparisons_seen_), e.line, e.column);
    comparisons_seen_ = comparisons;
    if (v.is_string()) charge(v.as_string().size(), e.line, e.column);
    if (v.is_list()) charge(16 * v.as_list().size(), e.line, e.column);
    return v;
  }

  Value eval_node(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::list: {
        List list;
        for (const auto& op : e.operands) list.push_back(eval(*op));
        if (std::any_of(list.begin(), list.end(), is_container)) count_nested_container(e.line, e.column);
        return Value(std::move(list));
      }
      case Expr::Kind::dict: {
        Dict dict;
        for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
          const Value key = eval(*e.operands[i]);
          if (!key.is_string()) fail_at(e, "dict keys must be strings, got a " + key.type_name());
          Value item = eval(*e.operands[i + 1]);
          if (is_container(item)) count_nested_container(e.line, e.column);
          dict.set(key.as_string(), std::move(item));
        }
        return Value(std::move(dict));
      }
      case Expr::Kind::attribute: {
        const Value obj = eval(*e.operands[0]);
        if (obj.is_undefined()) {
          fail_at(e, "'" + describe(*e.operands[0]) + "' is undefined (reading ." + e.name + ")");
        }
        return get_attribute(obj, e.name);
      }
      case Expr::Kind::subscript: {
        const Value obj = eval(*e.operands[0]);
        const Value key = eval(*e.operands[1]);
        if (obj.is_undefined()) {
          fail_at(e, "'" + describe(*e.operands[0]) + "' is undefined (reading [" + key.repr() + "])");
        }
        return at(e, [&] { return get_item(obj, key); });
      }
      case Expr::Kind::slice: {
        const Value obj = eval(*e.operands[0]);
        if (obj.is_undefined()) fail_at(e, "'" + describe(*e.operands[0]) + "' is undefined (slicing it)");
        Value bounds[3];
        for (int i = 0; i < 3; ++i) {
          if (e.operands[static_cast<size_t>(i) + 1]) bounds[i] = eval(*e.operands[static_cast<size_t>(i) + 1]);
        }
        const auto ptr = [&](int i) { return e.operands[static_cast<size_t>(i) + 1] ? &bounds[i] : nullptr; };
        return at(e, [&] { return slice(obj, ptr(0), ptr(1), ptr(2)); });
      }
      case Expr::Kind::call: {
        const Value callee = eval(*e.operands[0]);
        if (!callee.is_callable()) {
          fail_at(e, "'" + describe(*e.operands[0]) + "' is " +
                         (callee.is_undefined() ? std::string("undefined") : "a " + callee.type_name()) +
                         ", not a function");
        }
        Args args = eval_args(e.args);
        return at(e, [&] { return callee.as_callable().call(args); });
      }
      case Expr::Kind::filter: {
        const Value value = eval(*e.operands[0]);
        Args args = eval_args(e.args);
        return at(e, [&] { return apply_filter(e.name, value, args); });
      }
      case Expr::Kind::test: {
        const Value value = eval(*e.operands[0]);
        Args args = eval_args(e.args);
        return at(e, [&] { return Value(apply_test(e.name, value, args) != e.negated); });
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.operands[0]);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_int() || v.is_bool()) {
          const int64_t n = v.is_int() ? v.as_int() : v.as_bool();
          if (e.name == "-" && n == INT64_MIN) fail_at(e, "integer - overflows 64 bits");
          return Value(e.name == "-" ? -n : n);
        }
        if (v.is_float()) return Value(e.name == "-" ? -v.as_float() : v.as_float());
        fail_at(e, "bad operand type for unary " + e.name + ": " + v.type_name());
      }
      case Expr::Kind::binary: return eval_binary(e);
      case Expr::Kind::compare: {
        Value left = eval(*e.operands[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.operands[i + 1]);
          const std::string& op = e.ops[i];
          const bool ok = at(e, [&] {
                            if (op == "==") return Value(left.equals(right));
                            if (op == "!=") return Value(!left.equals(right));
                            if (op == "<") return Value(less_than(left, right));
                            if (op == ">") return Value(less_than(right, left));
                            if (op == "<=") return Value(!less_than(right, left));
                            if (op == ">=") return Value(!less_than(left, right));
                            if (op == "in") return Value(contains(right, left));
                            return Value(!contains(right, left));
                          }).as_bool();
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::condition: {
        if (eval(*e.operands[1]).truthy()) return eval(*e.operands[0]);
        return e.operands[2] ? eval(*e.operands[2]) : Value();
      }
    }
    return Value();
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value left = eval(*e.operands[0]);
      return left.truthy() ? eval(*e.operands[1]) : left;
    }
    if (op == "or") {
      Value left = eval(*e.operands[0]);
      return left.truthy() ? left : eval(*e.operands[1]);
    }
    const Value a = eval(*e.operands[0]);
    const Value b = eval(*e.operands[1]);
    if (op == "~") {
      std::string left = a.str();
      std::string right = b.str();
      check_string_size(left.size() + right.size(), "string concatenation (~)");
      return Value(left + right);
    }
    for (const Value* v : {&a, &b}) {
      if (v->is_undefined()) {
        const Expr& which = v == &a ? *e.operands[0] : *e.operands[1];
        fail_at(e, "'" + describe(which) + "' is undefined (operand of " + op + ")");
      }
    }
    const auto type_error = [&]() -> Value {
      fail_at(e, "unsupported operand types for " + op + ": " + a.type_name() + " and " + b.type_name());
    };
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        check_string_size(a.as_string().size() + b.as_string().size(), "string concatenation (+)");
        return Value(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list()) {
        check_list_size(a.as_list().size() + b.as_list().size(), "list concatenation (+)");
        List joined = a.as_list();
        joined.insert(joined.end(), b.as_list().begin(), b.as_list().end());
        return Value(std::move(joined));
      }
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
      const Value& seq = a.is_string() || a.is_list() ? a : b;
      const Value& count = &seq == &a ? b : a;
      if (!count.is_int()) return type_error();
      // Python repeats a negative count zero times. Sizes are compared by
      // division, as the product of two 64-bit numbers may not fit.
      const auto times = static_cast<uint64_t>(std::max<int64_t>(count.as_int(), 0));
      const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
      const size_t limit = seq.is_string() ? kMaxStringBytes : kMaxListItems;
      if (unit > 0 && times > limit / unit) {
        limit_exceeded(seq.is_string() ? "string repetition (*)" : "list repetition (*)",
                       times > SIZE_MAX / unit ? SIZE_MAX : unit * times, limit,
                       seq.is_string() ? "bytes" : "items");
      }
      // An empty sequence repeats to an empty one at once, whatever the count.
      const int64_t repeats = unit == 0 ? 0 : count.as_int();
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < repeats; ++i) out += seq.as_string();
        return Value(out);
      }
      List out;
      for (int64_t i = 0; i < repeats; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
      return Value(std::move(out));
    }
    if (!a.is_number() || !b.is_number()) return type_error();
    const bool integral = !a.is_float() && !b.is_float();
    const int64_t x = integral ? (a.is_int() ? a.as_int() : a.as_bool()) : 0;
    const int64_t y = integral ? (b.is_int() ? b.as_int() : b.as_bool()) : 0;
    const double p = a.as_number();
    const double q = b.as_number();
    if ((op == "/" || op == "//" || op == "%") && q == 0) fail_at(e, "division by zero");
    if (integral && (op == "+" || op == "-" || op == "*")) {
      int64_t r = 0;
      const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                            : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                        : __builtin_mul_overflow(x, y, &r);
      if (overflow) fail_at(e, "integer " + op + " overflows 64 bits");
      return Value(r);
    }
    if (integral && (op == "//" || op == "%") && x == INT64_MIN && y == -1) {
      if (op == "%") return Value(int64_t{0});
      fail_at(e, "integer // overflows 64 bits");
    }
    if (op == "+") return Value(p + q);
    if (op == "-") return Value(p - q);
    if (op == "*") return Value(p * q);
    if (op == "/") return Value(p / q);
    if (op == "//") {
      if (integral) return Value(x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0));
      return Value(std::floor(p / q));
    }
    if (op == "%") {
      if (integral) {
        const int64_t r = x % y;
        return Value(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
      }
      const double r = std::fmod(p, q);
      return Value(r != 0 && ((r < 0) != (q < 0)) ? r + q : r);
    }
    if (op == "**") {
      if (integral && y >= 0) {  // by squaring: y may be huge when x is 0 or ±1
        int64_t r = 1;
        int64_t base = x;
        for (int64_t k = y; k > 0; k >>= 1) {
          if ((k & 1) && __builtin_mul_overflow(r, base, &r)) fail_at(e, "integer ** overflows 64 bits");
          if (k > 1 && __builtin_mul_overflow(base, base, &base)) fail_at(e, "integer ** overflows 64 bits");
        }
        return Value(r);
      }
      return Value(std::pow(p, q));
    }
    return type_error();
  }

  std::vector<Scope> scopes_;  // [0]: globals; one more per loop iteration and macro call
  std::vector<Value> namespaces_;    // every namespace() made, cleared at the end
  size_t num_nested_containers_ = 0;  // see kMaxNestedContainers
  size_t work_ = 0;             // see kMaxRenderWork
  size_t comparisons_seen_ = num_comparisons_made();  // equals() steps already charged
  int eval_depth_ = 0;          // eval() calls under way
};

}  // namespace

Template::Template(std::string_view source) {
  auto parsed = std::make_shared<Parsed>();
  parsed->body = parse(tokenize(source));
  parsed_ = std::move(parsed);
}

Template::~Template() = default;
Template::Template(const Template&) = default;
Template& Template::operator=(const Template&) = default;

std::string Template::render(const Dict& variables) const { return Renderer(variables).run(parsed_->body); }

}  // namespace llmk::jinja
