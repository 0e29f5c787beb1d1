// Filters, tests, methods and global functions of the Jinja subset, with
// Python's behaviour where templates observe it. Internal to core/jinja/.
// Errors are Error(invalid_argument) without a position; the renderer adds
// the line and column of the expression.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/jinja/value.hpp"

namespace llmk::jinja {

Value apply_filter(std::string_view name, const Value& value, const Args& args);
bool apply_test(std::string_view name, const Value& value, const Args& args);
// obj.name: a dict's key (or one of its methods items/keys/values/get), a
// namespace's attribute, a string's method; undefined when there is none.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key] as jinja does it: item first, then attribute; undefined when
// there is neither.
Value get_item(const Value& obj, const Value& key);
// Python slicing of lists and strings; null bounds are Python's None.
Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
// Items a for loop visits: list elements, dict keys, string characters;
// none for undefined. Error for anything else.
List iterate(const Value& value);
// Python's `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// Python's <, for numbers, strings and lists; Error otherwise.
bool less_than(const Value& a, const Value& b);

// The UTF-8 characters of a string, one string each (Python's str indexing).
std::vector<std::string> utf8_chars(const std::string& s);

// Globals every render gets: raise_exception, strftime_now, namespace, range.
void add_builtin_globals(Dict& globals);

}  // namespace llmk::jinja
