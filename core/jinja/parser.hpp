// Parser of the Jinja subset: tokens to a syntax tree. Everything outside
// the subset (unknown tags such as include/extends/block/call/filter/with/
// raw, unknown filters and tests, recursive loops) is refused here, at
// load, with Error(unsupported) naming the construct, its line and column;
// malformed syntax is Error(invalid_argument), also with the position.
#pragma once

#include <string_view>

#include "core/jinja/ast.hpp"
#include "core/jinja/lexer.hpp"

namespace llmk::jinja {

Body parse(const std::vector<Token>& tokens);

// The filters and tests the renderer implements (core/jinja/builtins_filters.cpp).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace llmk::jinja
