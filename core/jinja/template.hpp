// A Jinja template of llmk's subset: parsed once, rendered many times.
//
// The subset is what Hugging Face chat templates use (see
// docs/chat_templates.md): text, {{ }}, {# #}, if/elif/else, for (with
// `loop`, a filter clause, else, break/continue), set (names, tuples,
// namespace attributes, blocks), macro, the generation tag, literals,
// arithmetic, comparisons, and/or/not, ternaries, attribute, subscript and
// slice access, and the filters, tests, methods and globals listed in
// core/jinja/builtins*.cpp. Whitespace follows jinja2 with trim_blocks and
// lstrip_blocks on, as transformers renders chat templates.
//
// Errors: a construct outside the subset is Error(unsupported) naming it
// with its line and column, raised when the template is parsed; malformed
// syntax is Error(invalid_argument) with the position; failures while
// rendering (an undefined variable's attribute, a type error,
// raise_exception("msg")) are Error(invalid_argument) naming the message
// and the position of the expression.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/jinja/value.hpp"

namespace llmk::jinja {

struct Stmt;

class Template {
 public:
  explicit Template(std::string_view source);
  ~Template();
  Template(const Template&);
  Template& operator=(const Template&);

  // Renders with `variables` visible as globals, over the built-ins
  // (raise_exception, strftime_now, namespace, range).
  std::string render(const Dict& variables) const;

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;  // shared by copies; never mutated after parsing
};

}  // namespace llmk::jinja
