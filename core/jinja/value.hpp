// Runtime values of the Jinja subset (core/jinja/): what Python's jinja2
// would hold, reduced to what chat templates use. Lists, dicts and
// namespaces are shared by reference (as Python objects are); everything
// else is copied.
//
// Tuples are lists (a tuple prints as [a, b], not (a, b)); chat templates
// unpack them and never print them.
//
// Semantics follow Python where templates can observe them: truthiness,
// == between int/float/bool, str() of None ("None") and of floats (repr),
// list/dict printing as Python's repr, dicts keeping insertion order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmk::jinja {

class Value;
using List = std::vector<Value>;

// Insertion-ordered string-keyed map (Python dicts keep insertion order and
// templates print and iterate them in that order). Lookups are linear: chat
// messages and tool schemas have a handful of keys.
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;  // made by namespace(): `{% set ns.x = ... %}` may assign to it

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value value);
};

// Positional and keyword arguments of a call, a filter or a test.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // The argument at `index` or named `name`; nullptr when absent.
  const Value* get(size_t index, std::string_view name) const;
};

// A function value: globals (raise_exception, namespace, range), bound
// methods ("a".strip) and macros.
struct Callable {
  std::string name;  // for error messages
  std::function<Value(const Args&)> call;
};

class Value {
 public:
  enum class Type { undefined, none, boolean, integer, floating, string, list, dict, callable };

  Value() = default;  // undefined
  static Value none() { return Value(Type::none); }
  Value(bool b) : data_(b) {}
  Value(int v) : data_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(List list) : data_(std::make_shared<List>(std::move(list))) {}
  Value(Dict dict) : data_(std::make_shared<Dict>(std::move(dict))) {}
  Value(std::shared_ptr<List> list) : data_(std::move(list)) {}
  Value(std::shared_ptr<Dict> dict) : data_(std::move(dict)) {}
  Value(Callable fn) : data_(std::make_shared<Callable>(std::move(fn))) {}

  // From JSON (objects keep their key order when the json is ordered;
  // nlohmann::json sorts keys, so callers wanting the sender's order pass
  // nlohmann::ordered_json).
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const;
  bool is_undefined() const { return type() == Type::undefined; }
  bool is_none() const { return type() == Type::none; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_int() const { return type() == Type::integer; }
  bool is_float() const { return type() == Type::floating; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type() == Type::string; }
  bool is_list() const { return type() == Type::list; }
  bool is_dict() const { return type() == Type::dict; }
  bool is_callable() const { return type() == Type::callable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // int, float or bool as a double (Python's numeric tower).
  double as_number() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(data_); }

  // Python truthiness; undefined is false.
  bool truthy() const;
  // str(): what {{ x }} prints. Undefined prints nothing.
  std::string str() const;
  // repr(): strings quoted as Python does, used inside printed lists/dicts.
  std::string repr() const;
  // Python's == (1 == 1.0 == True; lists and dicts element-wise); more
  // than kMaxComparisons element comparisons is Error(invalid_argument).
  bool equals(const Value& other) const;
  // Name of the type for messages ("string", "list", ...).
  std::string type_name() const;

 private:
  explicit Value(Type t);
  // equals, counting the comparisons made into `steps` (kMaxComparisons).
  bool equals_within(const Value& other, size_t& steps) const;
  struct Undefined {};
  struct None {};
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>, std::shared_ptr<Dict>,
               std::shared_ptr<Callable>>
      data_;
};

// Element comparisons equals() has made on this thread so far: a renderer
// charges them to its work budget (one == may stay within kMaxComparisons
// yet run in every loop iteration).
size_t num_comparisons_made();

// Python's repr() of a float ("1.0", "0.1", "1e+20", "inf").
std::string python_float_repr(double v);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=None,
// sort_keys=False), as transformers' tojson filter calls it: ", " and ": "
// without indent, "," and ": " with it; indent < 0 means none.
std::string to_json_text(const Value& v, int indent);

}  // namespace llmk::jinja
