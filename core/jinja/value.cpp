#include "core/jinja/value.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/jinja/limits.hpp"

namespace llmk::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    entries.emplace_back(std::move(key), std::move(value));
  }
}

const Value* Args::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keywords) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value::Value(Type t) {
  if (t == Type::none) data_ = None{};
}

namespace {

template <typename Json>
Value value_from_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List list;
      for (const auto& e : j) list.push_back(value_from_json(e));
      return Value(std::move(list));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      for (auto it = j.begin(); it != j.end(); ++it) dict.entries.emplace_back(it.key(), value_from_json(it.value()));
      return Value(std::move(dict));
    }
    default: throw Error(ErrorCode::invalid_argument, "jinja: a JSON value of an unsupported type (binary)");
  }
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

void append_json(std::string& out, const Value& v, int indent, int level) {
  if (level > kMaxNesting) limit_exceeded("tojson of a value", static_cast<size_t>(level), kMaxNesting, "levels deep");
  check_string_size(out.size(), "tojson");
  const auto newline = [&](int at) {
    out += '\n';
    out.append(static_cast<size_t>(indent * at), ' ');
  };
  switch (v.type()) {
    case Value::Type::none: out += "null"; return;
    case Value::Type::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::integer: out += std::to_string(v.as_int()); return;
    case Value::Type::floating: {
      const double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(d);
      return;
    }
    case Value::Type::string: append_json_string(out, v.as_string()); return;
    case Value::Type::list: {
      const List& list = v.as_list();
      if (list.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i > 0) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        append_json(out, list[i], indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case Value::Type::dict: {
      const Dict& dict = v.as_dict();
      if (dict.entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < dict.entries.size(); ++i) {
        if (i > 0) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        append_json_string(out, dict.entries[i].first);
        out += ": ";
        append_json(out, dict.entries[i].second, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
    case Value::Type::undefined:
    case Value::Type::callable:
      throw Error(ErrorCode::invalid_argument, "jinja: tojson: a " + v.type_name() + " is not JSON serializable");
  }
}

std::string python_string_repr(const std::string& s);

// repr() of lists and dicts, bounded: lists may share items (each print
// doubles), and nesting may be as deep as a loop makes it.
void append_repr(std::string& out, const Value& v, int level) {
  if (level > kMaxNesting) limit_exceeded("printing a value", static_cast<size_t>(level), kMaxNesting, "levels deep");
  if (v.is_list()) {
    out += '[';
    const List& list = v.as_list();
    for (size_t i = 0; i < list.size(); ++i) {
      if (i > 0) out += ", ";
      append_repr(out, list[i], level + 1);
      check_string_size(out.size(), "printing a list");
    }
    out += ']';
  } else if (v.is_dict() && !v.as_dict().is_namespace) {
    out += '{';
    const Dict& dict = v.as_dict();
    for (size_t i = 0; i < dict.entries.size(); ++i) {
      if (i > 0) out += ", ";
      out += python_string_repr(dict.entries[i].first) + ": ";
      append_repr(out, dict.entries[i].second, level + 1);
      check_string_size(out.size(), "printing a dict");
    }
    out += '}';
  } else {
    out += v.repr();
  }
}

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) (out += '\\') += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j); }

Value::Type Value::type() const { return static_cast<Type>(data_.index()); }

double Value::as_number() const {
  switch (type()) {
    case Type::integer: return static_cast<double>(as_int());
    case Type::floating: return as_float();
    case Type::boolean: return as_bool() ? 1.0 : 0.0;
    default: throw Error(ErrorCode::internal, "jinja: as_number of a " + type_name());
  }
}

bool Value::truthy() const {
  switch (type()) {
    case Type::undefined:
    case Type::none: return false;
    case Type::boolean: return as_bool();
    case Type::integer: return as_int() != 0;
    case Type::floating: return as_float() != 0.0;
    case Type::string: return !as_string().empty();
    case Type::list: return !as_list().empty();
    case Type::dict: return as_dict().is_namespace || !as_dict().entries.empty();
    case Type::callable: return true;
  }
  return false;
}

std::string Value::str() const {
  switch (type()) {
    case Type::undefined: return "";
    case Type::string: return as_string();
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (type()) {
    case Type::undefined: return "";
    case Type::none: return "None";
    case Type::boolean: return as_bool() ? "True" : "False";
    case Type::integer: return std::to_string(as_int());
    case Type::floating: return python_float_repr(as_float());
    case Type::string: return python_string_repr(as_string());
    case Type::list: {
      std::string out;
      append_repr(out, *this, 0);
      return out;
    }
    case Type::dict: {
      if (as_dict().is_namespace) return "<Namespace>";
      std::string out;
      append_repr(out, *this, 0);
      return out;
    }
    case Type::callable: return "<function " + as_callable().name + ">";
  }
  return "";
}

namespace {
thread_local size_t comparisons_made = 0;
}  // namespace

size_t num_comparisons_made() { return comparisons_made; }

bool Value::equals(const Value& other) const {
  size_t steps = 0;
  return equals_within(other, steps);
}

bool Value::equals_within(const Value& other, size_t& steps) const {
  ++comparisons_made;
  if (++steps > kMaxComparisons) limit_exceeded("==", steps, kMaxComparisons, "comparisons");
  if (is_number() && other.is_number()) {
    if ((is_int() || is_bool()) && (other.is_int() || other.is_bool())) {
      const int64_t a = is_int() ? as_int() : static_cast<int64_t>(as_bool());
      const int64_t b = other.is_int() ? other.as_int() : static_cast<int64_t>(other.as_bool());
      return a == b;
    }
    return as_number() == other.as_number();
  }
  if (type() != other.type()) return false;
  switch (type()) {
    case Type::undefined:
    case Type::none: return true;
    case Type::string: return as_string() == other.as_string();
    case Type::list: {
      const List& a = as_list();
      const List& b = other.as_list();
      if (&a == &b) return true;  // as Python's list ==, identity first (lists may share items)
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].equals_within(b[i], steps)) return false;
      }
      return true;
    }
    case Type::dict: {
      const Dict& a = as_dict();
      const Dict& b = other.as_dict();
      if (a.is_namespace || b.is_namespace) return &a == &b;
      if (a.entries.size() != b.entries.size()) return false;
      for (const auto& [k, v] : a.entries) {
        const Value* w = b.find(k);
        if (w == nullptr || !v.equals_within(*w, steps)) return false;
      }
      return true;
    }
    case Type::callable: return &as_callable() == &other.as_callable();
    default: return false;
  }
}

std::string Value::type_name() const {
  switch (type()) {
    case Type::undefined: return "undefined value";
    case Type::none: return "none";
    case Type::boolean: return "boolean";
    case Type::integer: return "integer";
    case Type::floating: return "float";
    case Type::string: return "string";
    case Type::list: return "list";
    case Type::dict: return as_dict().is_namespace ? "namespace" : "dict";
    case Type::callable: return "function";
  }
  return "value";
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: positional for
  // exponents in [-4, 16), else d.ddde+XX.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    } else {
      const size_t int_len = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out.append(digits, 0, int_len);
        out += '.';
        out.append(digits, int_len, std::string::npos);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

std::string to_json_text(const Value& v, int indent) {
  std::string out;
  append_json(out, v, indent, 0);
  return out;
}

}  // namespace llmk::jinja
