// The renderer's expressions (renderer_impl.hpp): names, literals,
// containers, attribute and item access, calls, filters and tests, and the
// unary and binary operators with Python's semantics, each evaluation
// charged to the rendering's work budget.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/jinja/renderer_impl.hpp"

namespace llmk::jinja::detail {

Args Renderer::eval_args(const CallArgs& call_args) {
  Args args;
  for (const auto& p : call_args.positional) args.positional.push_back(eval(*p));
  for (const auto& [k, v] : call_args.keywords) args.keywords.emplace_back(k, eval(*v));
  return args;
}

// Evaluates `e` within kMaxEvalDepth, charging the value it yields to the
// work budget; an error gets e's position unless it has one.
Value Renderer::eval(const Expr& e) {
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

Value Renderer::eval_node(const Expr& e) {
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

Value Renderer::eval_binary(const Expr& e) {
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

}  // namespace llmk::jinja::detail
