// The Jinja builtins every expression reaches: a value's attributes and
// items (dict methods, string methods through builtins_strings.cpp),
// iteration, `in`, ordering and slicing, with Python's behaviour where
// templates observe it; the argument checks the builtins' files share.
// Tests, filters and globals are in builtins_filters.cpp.
#include "core/jinja/builtins.hpp"

#include <algorithm>
#include <optional>

#include "core/error.hpp"
#include "core/jinja/builtins_detail.hpp"

namespace llmk::jinja {
namespace detail {

void fail(const std::string& what) { throw Error(ErrorCode::invalid_argument, "jinja: " + what); }

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) fail(std::string(what) + " needs a string, got a " + v.type_name());
  return v.as_string();
}

int64_t need_int(const Value& v, std::string_view what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  fail(std::string(what) + " needs an integer, got a " + v.type_name());
}

Value method(std::string name, std::function<Value(const Args&)> fn) { return Value(Callable{std::move(name), std::move(fn)}); }

}  // namespace detail

namespace {

using namespace detail;

Value dict_method(const Value& obj, const std::string& name) {
  if (name == "items") {
    return method(name, [obj](const Args&) {
      List out;
      for (const auto& [k, v] : obj.as_dict().entries) out.emplace_back(List{Value(k), v});
      return Value(std::move(out));
    });
  }
  if (name == "keys") {
    return method(name, [obj](const Args&) {
      List out;
      for (const auto& entry : obj.as_dict().entries) out.emplace_back(entry.first);
      return Value(std::move(out));
    });
  }
  if (name == "values") {
    return method(name, [obj](const Args&) {
      List out;
      for (const auto& entry : obj.as_dict().entries) out.push_back(entry.second);
      return Value(std::move(out));
    });
  }
  if (name == "get") {
    return method(name, [obj](const Args& a) {
      const Value* key = a.get(0, "key");
      if (key == nullptr) fail("get needs a key");
      const Value* fallback = a.get(1, "default");
      if (key->is_string()) {
        if (const Value* v = obj.as_dict().find(key->as_string())) return *v;
      }
      return fallback ? *fallback : Value::none();
    });
  }
  return Value();
}

}  // namespace

using namespace detail;

List iterate(const Value& value) {
  switch (value.type()) {
    case Value::Type::undefined: return {};
    case Value::Type::list: return value.as_list();
    case Value::Type::dict: {
      if (value.as_dict().is_namespace) break;
      List keys;
      for (const auto& entry : value.as_dict().entries) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Type::string: {
      List chars;
      for (auto& c : utf8_chars(value.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    default: break;
  }
  fail("a " + value.type_name() + " is not iterable");
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.type()) {
    case Value::Type::undefined: return false;
    case Value::Type::string:
      return haystack.as_string().find(need_string(needle, "'in' on a string")) != std::string::npos;
    case Value::Type::list:
      return std::any_of(haystack.as_list().begin(), haystack.as_list().end(),
                         [&](const Value& v) { return v.equals(needle); });
    case Value::Type::dict: return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
    default: fail("'in' needs a string, list or dict on its right, got a " + haystack.type_name());
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_number() < b.as_number();  // exact for |n| < 2^53
    return a.as_number() < b.as_number();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!x[i].equals(y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  fail("cannot order a " + a.type_name() + " and a " + b.type_name());
}

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::dict: {
      if (obj.as_dict().is_namespace) {
        const Value* v = obj.as_dict().find(name);
        return v ? *v : Value();
      }
      Value m = dict_method(obj, name);  // Python attributes win over keys, as in jinja's getattr
      if (!m.is_undefined()) return m;
      const Value* v = obj.as_dict().find(name);
      return v ? *v : Value();
    }
    case Value::Type::string: return string_method(obj.as_string(), name);
    default: return Value();
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Value::Type::dict:
      if (key.is_string()) {
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
        return get_attribute(obj, key.as_string());
      }
      return Value();
    case Value::Type::list:
    case Value::Type::string: {
      if (key.is_string()) return get_attribute(obj, key.as_string());
      if (!key.is_int() && !key.is_bool()) return Value();
      int64_t i = need_int(key, "an index");
      if (obj.is_list()) {
        const auto n = static_cast<int64_t>(obj.as_list().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();
        return obj.as_list()[static_cast<size_t>(i)];
      }
      const auto chars = utf8_chars(obj.as_string());
      const auto n = static_cast<int64_t>(chars.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return Value(chars[static_cast<size_t>(i)]);
    }
    default: return Value();
  }
}

Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  const auto bound = [](const Value* v) -> std::optional<int64_t> {
    if (v == nullptr || v->is_none()) return std::nullopt;
    return need_int(*v, "a slice bound");
  };
  std::vector<Value> items;
  if (obj.is_list()) {
    items = obj.as_list();
  } else if (obj.is_string()) {
    for (auto& c : utf8_chars(obj.as_string())) items.emplace_back(std::move(c));
  } else {
    fail("cannot slice a " + obj.type_name());
  }
  const auto n = static_cast<int64_t>(items.size());
  const int64_t st = bound(step).value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg) {
    if (!v) return st > 0 ? def_pos : def_neg;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t lo = adjust(bound(start), 0, n - 1);
  const int64_t hi = adjust(bound(stop), n, -1);
  List out;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) out.push_back(items[static_cast<size_t>(i)]);
  if (obj.is_list()) return Value(std::move(out));
  std::string s;
  for (const Value& c : out) s += c.as_string();
  return Value(std::move(s));
}

}  // namespace llmk::jinja
