// Jinja's tests (`x is odd`), filters (`x | join(", ")`) and the globals
// every render gets, as far as chat templates use them, with Python's
// behaviour where templates observe it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>

#include "core/error.hpp"
#include "core/jinja/builtins.hpp"
#include "core/jinja/builtins_detail.hpp"
#include "core/jinja/limits.hpp"
#include "core/jinja/parser.hpp"

namespace llmk::jinja {
namespace {

using namespace detail;

int64_t length_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::undefined: return 0;
    case Value::Type::string: return static_cast<int64_t>(utf8_chars(v.as_string()).size());
    case Value::Type::list: return static_cast<int64_t>(v.as_list().size());
    case Value::Type::dict: return static_cast<int64_t>(v.as_dict().entries.size());
    default: fail("length of a " + v.type_name());
  }
}

// The attribute path "a.b" of selectattr/map, item-or-attribute at each step.
Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    cur = get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

// select/reject/selectattr/rejectattr: args are [attribute,] test name, test args.
Value filter_by_test(const Value& seq, const Args& args, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    const Value* a = args.get(0, "attribute");
    if (a == nullptr) fail("selectattr/rejectattr need an attribute name");
    attribute = need_string(*a, "selectattr");
    next = 1;
  }
  std::string test;
  Args test_args;
  if (next < args.positional.size()) {
    test = need_string(args.positional[next], "select");
    if (!is_known_test(test)) {
      throw Error(ErrorCode::unsupported, "jinja: unsupported construct test '" + test + "' (outside llmk's Jinja subset)");
    }
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next) + 1, args.positional.end());
  }
  List out;
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value to_int(const Value& v, const Value* fallback) {
  const Value def = fallback ? *fallback : Value(int64_t{0});
  switch (v.type()) {
    case Value::Type::integer: return v;
    case Value::Type::boolean: return Value(static_cast<int64_t>(v.as_bool()));
    case Value::Type::floating: {
      const double d = std::trunc(v.as_float());
      // Beyond 64 bits (or NaN) there is no int64 to give: the default, as for text that is no number.
      return std::fabs(d) < 9.2e18 ? Value(static_cast<int64_t>(d)) : def;
    }
    case Value::Type::string: {
      const std::string s = strip_chars(v.as_string(), nullptr, true, true);
      try {
        size_t used = 0;
        const int64_t n = std::stoll(s, &used, 10);
        if (used == s.size()) return Value(n);
        const double d = std::stod(s, &used);
        if (used == s.size() && std::fabs(std::trunc(d)) < 9.2e18) return Value(static_cast<int64_t>(std::trunc(d)));
      } catch (const std::exception&) {
      }
      return def;
    }
    default: return def;
  }
}

}  // namespace

using namespace detail;

bool apply_test(std::string_view name, const Value& v, const Args& args) {
  const auto arg = [&]() -> const Value& {
    const Value* a = args.get(0, "value");
    if (a == nullptr) fail("test '" + std::string(name) + "' needs an argument");
    return *a;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
  if (name == "iterable" || name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace);
  }
  if (name == "callable") return v.is_callable();
  if (name == "eq" || name == "equalto" || name == "==") return v.equals(arg());
  if (name == "ne" || name == "!=") return !v.equals(arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, arg());
  if (name == "le" || name == "<=") return !less_than(arg(), v);
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(arg(), v);
  if (name == "ge" || name == ">=") return !less_than(v, arg());
  if (name == "in") return contains(arg(), v);
  if (name == "odd") return need_int(v, "odd") % 2 != 0;
  if (name == "even") return need_int(v, "even") % 2 == 0;
  if (name == "divisibleby") {
    const int64_t d = need_int(arg(), "divisibleby");
    if (d == 0) fail("divisibleby(0)");
    return need_int(v, "divisibleby") % d == 0;
  }
  if (name == "sameas") {
    const Value& o = arg();
    if (v.type() != o.type()) return false;
    if (v.is_list()) return &v.as_list() == &o.as_list();
    if (v.is_dict()) return &v.as_dict() == &o.as_dict();
    return v.equals(o);
  }
  if (name == "lower") return v.is_string() && to_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && to_upper(v.as_string()) == v.as_string();
  throw Error(ErrorCode::unsupported, "jinja: unsupported construct test '" + std::string(name) + "'");
}

bool is_known_test(std::string_view name) {
  static const char* const names[] = {"defined", "undefined", "none",  "boolean", "true",        "false",  "integer",
                                      "float",   "number",    "string", "mapping", "iterable",    "sequence",
                                      "callable", "eq",       "equalto", "==",     "ne",          "!=",     "lt",
                                      "lessthan", "<",        "le",     "<=",      "gt",          "greaterthan",
                                      ">",       "ge",        ">=",     "in",      "odd",         "even",
                                      "divisibleby", "sameas", "lower", "upper"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

bool is_known_filter(std::string_view name) {
  static const char* const names[] = {"trim",   "length",  "count",   "upper",      "lower",      "capitalize",
                                      "title",  "tojson",  "default", "d",          "join",       "first",
                                      "last",   "items",   "replace", "string",     "int",        "float",
                                      "list",   "selectattr", "rejectattr", "select", "reject",   "map",
                                      "abs",    "safe",    "unique",  "reverse",    "dictsort",   "sum"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value apply_filter(std::string_view name, const Value& v, const Args& args) {
  // String filters convert first, as jinja's soft_str does (None -> "None").
  if (name == "trim") return Value(strip_chars(v.str(), args.get(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "upper") return Value(to_upper(v.str()));
  if (name == "lower") return Value(to_lower(v.str()));
  if (name == "capitalize") return Value(capitalize(v.str()));
  if (name == "title") return Value(to_title(v.str()));
  if (name == "safe") return v;
  if (name == "string") return v.is_string() ? v : Value(v.str());
  if (name == "tojson") {
    for (const auto& [key, value] : args.keywords) {
      if (key != "indent" && !(key == "ensure_ascii" && value.is_bool() && !value.as_bool()) &&
          !(key == "sort_keys" && value.is_bool() && !value.as_bool())) {
        throw Error(ErrorCode::unsupported, "jinja: unsupported construct tojson argument '" + key + "'");
      }
    }
    const Value* indent = args.get(0, "indent");
    const int64_t spaces = indent == nullptr || indent->is_none() ? -1 : need_int(*indent, "tojson indent");
    if (spaces > 64) limit_exceeded("tojson indent", static_cast<size_t>(spaces), 64, "spaces");
    return Value(to_json_text(v, static_cast<int>(std::max<int64_t>(spaces, -1))));
  }
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    const Value* boolean = args.get(1, "boolean");
    const bool use_fallback = boolean && boolean->truthy() ? !v.truthy() : v.is_undefined();
    return use_fallback ? (fallback ? *fallback : Value(std::string())) : v;
  }
  if (name == "join") {
    const Value* sep = args.get(0, "d");
    const Value* attribute = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep ? sep->str() : "";
      first = false;
      out += (attribute ? attribute_path(item, attribute->str()) : item).str();
      check_string_size(out.size(), "join");
    }
    return Value(out);
  }
  if (name == "first" || name == "last") {
    const List items = iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) fail("items needs a dict, got a " + v.type_name());
    return get_attribute(v, "items").as_callable().call(Args{});
  }
  if (name == "replace") {
    const Value* from = args.get(0, "old");
    const Value* to = args.get(1, "new");
    const Value* count = args.get(2, "count");
    if (from == nullptr || to == nullptr) fail("replace needs two arguments");
    return Value(replace_all(v.str(), from->str(), to->str(), count && !count->is_none() ? need_int(*count, "replace") : -1));
  }
  if (name == "int") return to_int(v, args.get(0, "default"));
  if (name == "float") {
    if (v.is_number()) return Value(v.as_number());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = strip_chars(v.as_string(), nullptr, true, true);
        const double d = std::stod(s, &used);
        if (used == s.size()) return Value(d);
      } catch (const std::exception&) {
      }
    }
    const Value* fallback = args.get(0, "default");
    return fallback ? *fallback : Value(0.0);
  }
  if (name == "list") return Value(iterate(v));
  if (name == "selectattr") return filter_by_test(v, args, true, true);
  if (name == "rejectattr") return filter_by_test(v, args, true, false);
  if (name == "select") return filter_by_test(v, args, false, true);
  if (name == "reject") return filter_by_test(v, args, false, false);
  if (name == "map") {
    List out;
    const Value* attribute = args.get(99, "attribute");
    const Value* fallback = args.get(99, "default");
    if (attribute != nullptr) {
      for (const Value& item : iterate(v)) {
        Value x = attribute_path(item, attribute->str());
        out.push_back(x.is_undefined() && fallback ? *fallback : x);
      }
      return Value(std::move(out));
    }
    if (args.positional.empty()) fail("map needs a filter name or attribute=");
    const std::string filter = need_string(args.positional[0], "map");
    if (!is_known_filter(filter) || filter == "map") {
      throw Error(ErrorCode::unsupported, "jinja: unsupported construct filter '" + filter + "' (in map)");
    }
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keywords = args.keywords;
    for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, rest));
    return Value(std::move(out));
  }
  if (name == "abs") {
    if (v.is_int()) {
      if (v.as_int() == INT64_MIN) fail("abs overflows 64 bits");
      return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    fail("abs of a " + v.type_name());
  }
  if (name == "unique") {  // pairwise, as values need not be hashable: bounded by kMaxComparisons
    List out;
    size_t num_comparisons = 0;
    for (const Value& item : iterate(v)) {
      num_comparisons += out.size();
      if (num_comparisons > kMaxComparisons) limit_exceeded("unique", num_comparisons, kMaxComparisons, "comparisons");
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.equals(item); })) out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto chars = utf8_chars(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(out);
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("dictsort needs a dict, got a " + v.type_name());
    List out = get_attribute(v, "items").as_callable().call(Args{}).as_list();
    std::stable_sort(out.begin(), out.end(), [](const Value& a, const Value& b) {
      return to_lower(a.as_list()[0].as_string()) < to_lower(b.as_list()[0].as_string());
    });
    return Value(std::move(out));
  }
  if (name == "sum") {
    Value total(int64_t{0});
    for (const Value& item : iterate(v)) {
      if (!item.is_number()) fail("sum of a " + item.type_name());
      if (total.is_float() || item.is_float()) total = Value(total.as_number() + item.as_number());
      else {
        int64_t sum = 0;
        if (__builtin_add_overflow(total.as_int(), need_int(item, "sum"), &sum)) fail("sum overflows 64 bits");
        total = Value(sum);
      }
    }
    return total;
  }
  throw Error(ErrorCode::unsupported, "jinja: unsupported construct filter '" + std::string(name) + "'");
}

void add_builtin_globals(Dict& globals) {
  globals.set("raise_exception", Value(Callable{"raise_exception", [](const Args& a) -> Value {
    const Value* message = a.get(0, "message");
    throw Error(ErrorCode::invalid_argument,
                "chat template raised an exception: " + (message ? message->str() : std::string()));
  }}));
  globals.set("strftime_now", Value(Callable{"strftime_now", [](const Args& a) {
    const Value* format = a.get(0, "format");
    if (format == nullptr) fail("strftime_now needs a format");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, need_string(*format, "strftime_now").c_str(), &local);
    return Value(std::string(buf, n));
  }}));
  globals.set("namespace", Value(Callable{"namespace", [](const Args& a) {
    Dict ns;
    ns.is_namespace = true;
    for (const Value& p : a.positional) {
      if (!p.is_dict()) fail("namespace() takes a dict or keyword arguments");
      for (const auto& [k, v] : p.as_dict().entries) ns.set(k, v);
    }
    for (const auto& [k, v] : a.keywords) ns.set(k, v);
    return Value(std::move(ns));
  }}));
  globals.set("range", Value(Callable{"range", [](const Args& a) {
    int64_t start = 0;
    int64_t stop = 0;
    int64_t step = 1;
    if (a.positional.size() == 1) {
      stop = need_int(a.positional[0], "range");
    } else if (a.positional.size() >= 2) {
      start = need_int(a.positional[0], "range");
      stop = need_int(a.positional[1], "range");
      if (a.positional.size() > 2) step = need_int(a.positional[2], "range");
    } else {
      fail("range needs an argument");
    }
    if (step == 0) fail("range step cannot be zero");
    // Length as Python computes it, in unsigned 64 bits: start, stop and step
    // may be anywhere in int64, and |stop - start| and |step| still fit.
    const bool up = step > 0;
    const bool empty = up ? stop <= start : stop >= start;
    const uint64_t span = empty ? 0 : up ? uint64_t(stop) - uint64_t(start) : uint64_t(start) - uint64_t(stop);
    const uint64_t stride = up ? uint64_t(step) : uint64_t{0} - uint64_t(step);
    const uint64_t length = span / stride + (span % stride != 0 ? 1 : 0);
    if (length > kMaxListItems) {
      limit_exceeded("range()", length > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(length), kMaxListItems, "items");
    }
    List out;
    out.reserve(static_cast<size_t>(length));
    // Every item lies between start and stop; the step past the last one
    // wraps in unsigned arithmetic and is never read.
    uint64_t v = uint64_t(start);
    for (uint64_t k = 0; k < length; ++k, v += uint64_t(step)) out.emplace_back(static_cast<int64_t>(v));
    return Value(std::move(out));
  }}));
}

}  // namespace llmk::jinja
