// What the files of the Jinja builtins share (internal to core/jinja/):
// argument checks, bound methods, and the str operations that both the
// string methods (builtins_strings.cpp) and the filters
// (builtins_filters.cpp) perform.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/jinja/value.hpp"

namespace llmk::jinja::detail {

// Error(invalid_argument) "jinja: <what>".
[[noreturn]] void fail(const std::string& what);
const std::string& need_string(const Value& v, std::string_view what);
// An integer (a bool counts as 0 or 1), else Error naming `what`.
int64_t need_int(const Value& v, std::string_view what);
// A callable named `name` (a bound method).
Value method(std::string name, std::function<Value(const Args&)> fn);

// str.strip family: `chars` null or None strips whitespace.
std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right);
std::string to_upper(std::string s);
std::string to_lower(std::string s);
// Python's str.title(): a letter after a non-letter is upper-cased, the rest lowered.
std::string to_title(const std::string& s);
std::string capitalize(const std::string& s);
// Python's str.replace; count < 0 replaces all.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count);
// s.name as a bound method (strip, split, startswith, upper, replace, join,
// find, ...); undefined when str has no such method here.
Value string_method(const std::string& s, const std::string& name);

}  // namespace llmk::jinja::detail
