// Resource limits of the Jinja subset. A template may come with a model or
// a request, so neither parsing nor rendering may use memory, stack or time
// without bound; a template that would is Error(invalid_argument) naming the
// construct and the limit. Chat prompts are far below every limit (see
// docs/chat_templates.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace llmk::jinja {

// Longest string a rendering builds: its output, a {% set %} block, a
// repetition, concatenation, join, replace or printed list.
inline constexpr size_t kMaxStringBytes = size_t{4} << 20;
// Longest list a rendering builds: range(), list repetition and concatenation.
inline constexpr size_t kMaxListItems = 100'000;
// Deepest nesting of expressions and statements in a parsed template, and of
// values printed or serialized (a namespace may hold itself).
inline constexpr int kMaxNesting = 200;
// Deepest chain of expression evaluations while rendering (macro calls from
// within nested expressions add up).
inline constexpr int kMaxEvalDepth = 1'000;
// Lists, dicts and namespaces one rendering builds holding another list,
// dict or namespace (and namespace() calls and container assignments to a
// namespace attribute): each can nest one level deeper than what it holds,
// and freeing a value recurses through its nesting.
inline constexpr size_t kMaxNestedContainers = 2'000;
// Most comparisons one == (of nested lists and dicts, which may share
// items: [x, x] doubles per level) or one unique filter makes.
inline constexpr size_t kMaxComparisons = 10'000'000;
// Total work of one rendering, in bytes: every string value an expression
// yields costs its length, every list value 16 bytes per item, every element
// comparison (==, in, unique) 16 bytes, every loop
// iteration and macro call 4 KiB (so at most 65536 of them). It bounds time (quadratic string building,
// nested loops) where the size limits bound memory.
inline constexpr size_t kMaxRenderWork = size_t{256} << 20;

[[noreturn]] inline void limit_exceeded(std::string_view construct, size_t wanted, size_t limit, std::string_view unit) {
  throw Error(ErrorCode::invalid_argument, "jinja: " + std::string(construct) + " would be " + std::to_string(wanted) +
                                               " " + std::string(unit) + ", over the limit of " +
                                               std::to_string(limit));
}

// Throws unless a string of `bytes` is within kMaxStringBytes.
inline void check_string_size(size_t bytes, std::string_view construct) {
  if (bytes > kMaxStringBytes) limit_exceeded(construct, bytes, kMaxStringBytes, "bytes");
}

// Throws unless a list of `items` is within kMaxListItems.
inline void check_list_size(size_t items, std::string_view construct) {
  if (items > kMaxListItems) limit_exceeded(construct, items, kMaxListItems, "items");
}

}  // namespace llmk::jinja
