// The tree-walking renderer behind jinja::Template: the template's entry
// points and the statements (text, output, if, for, set, macro), with the
// limits on output and work (renderer_impl.hpp).
#include <algorithm>

#include "core/jinja/lexer.hpp"
#include "core/jinja/parser.hpp"
#include "core/jinja/renderer_impl.hpp"
#include "core/jinja/template.hpp"

namespace llmk::jinja {
namespace detail {

Flow Renderer::render_body(const Body& body, std::string& out) {
  for (const auto& stmt : body) {
    const Flow flow = render_stmt(*stmt, out);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Flow Renderer::render_stmt(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case Stmt::Kind::text:
      out += s.text;
      check_output(out, s);
      return Flow::normal;
    case Stmt::Kind::print:
      out += at(*s.expr, [&] { return Value(eval(*s.expr).str()); }).as_string();
      check_output(out, s);
      return Flow::normal;
    case Stmt::Kind::if_chain:
      for (const auto& [condition, body] : s.branches) {
        if (!condition || eval(*condition).truthy()) return render_body(body, out);
      }
      return Flow::normal;
    case Stmt::Kind::for_loop: render_for(s, out); return Flow::normal;
    case Stmt::Kind::set: {
      const Value value = eval(*s.expr);
      if (!s.attribute.empty()) {
        const Value target = lookup(s.targets[0]);
        if (!target.is_dict() || !target.as_dict().is_namespace) {
          throw Error(ErrorCode::invalid_argument, "jinja: cannot assign attribute '" + s.attribute + "' of '" +
                                                       s.targets[0] + "', which is not a namespace" +
                                                       position(s.line, s.column));
        }
        if (is_container(value)) count_nested_container(s.line, s.column);
        target.as_dict().set(s.attribute, value);
      } else {
        assign(s.targets, value, s.line, s.column);
      }
      return Flow::normal;
    }
    case Stmt::Kind::set_block: {
      std::string captured;
      render_body(s.body, captured);
      scopes_.back()[s.targets[0]] = Value(std::move(captured));
      return Flow::normal;
    }
    case Stmt::Kind::macro: scopes_.back()[s.name] = make_macro(s); return Flow::normal;
    case Stmt::Kind::loop_break: return Flow::loop_break;
    case Stmt::Kind::loop_continue: return Flow::loop_continue;
  }
  return Flow::normal;
}

void Renderer::assign(const std::vector<std::string>& targets, const Value& value, int line, int column) {
  if (targets.size() == 1) {
    scopes_.back()[targets[0]] = value;
    return;
  }
  const List items = value.is_list() ? value.as_list() : List{};
  if (items.size() != targets.size()) {
    throw Error(ErrorCode::invalid_argument, "jinja: cannot unpack a " + value.type_name() + " into " +
                                                 std::to_string(targets.size()) + " names" + position(line, column));
  }
  for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
}

void Renderer::render_for(const Stmt& s, std::string& out) {
  const Value iterable = eval(*s.expr);
  List items;
  try {
    items = iterate(iterable);
  } catch (const Error& e) {
    fail_at(*s.expr, std::string(e.what()).substr(7));
  }
  if (s.filter) {  // the `if` clause filters before `loop` is counted
    List kept;
    for (const Value& item : items) {
      charge(4096, s.line, s.column);
      scopes_.emplace_back();
      assign(s.targets, item, s.line, s.column);
      const bool keep = eval(*s.filter).truthy();
      scopes_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    render_body(s.else_body, out);
    return;
  }
  if (scopes_.size() > kMaxDepth) throw Error(ErrorCode::invalid_argument, "jinja: nesting too deep" + position(s.line, s.column));
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Dict loop;
    loop.set("index0", Value(i));
    loop.set("index", Value(i + 1));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("revindex", Value(n - i));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(int64_t{1}));
    loop.set("depth0", Value(int64_t{0}));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
    loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value());
    loop.set("cycle", Value(Callable{"loop.cycle", [i](const Args& a) {
      if (a.positional.empty()) throw Error(ErrorCode::invalid_argument, "jinja: loop.cycle needs arguments");
      return a.positional[static_cast<size_t>(i) % a.positional.size()];
    }}));
    charge(4096, s.line, s.column);
    scopes_.emplace_back();
    scopes_.back()["loop"] = Value(std::move(loop));
    assign(s.targets, items[static_cast<size_t>(i)], s.line, s.column);
    const Flow flow = render_body(s.body, out);
    scopes_.pop_back();
    if (flow == Flow::loop_break) break;
  }
}

Value Renderer::make_macro(const Stmt& s) {
  const Stmt* macro = &s;
  return Value(Callable{s.name, [this, macro](const Args& a) {
    if (scopes_.size() > kMaxDepth) {
      throw Error(ErrorCode::invalid_argument, "jinja: macro '" + macro->name + "' recursed too deep");
    }
    charge(4096, macro->line, macro->column);
    Scope frame;
    for (size_t i = 0; i < macro->params.size(); ++i) {
      const auto& [param, default_value] = macro->params[i];
      const Value* given = a.get(i, param);
      frame[param] = given ? *given : default_value ? eval(*default_value) : Value();
    }
    if (a.positional.size() > macro->params.size()) {
      throw Error(ErrorCode::invalid_argument, "jinja: macro '" + macro->name + "' takes " +
                                                   std::to_string(macro->params.size()) + " arguments");
    }
    scopes_.push_back(std::move(frame));
    std::string out;
    render_body(macro->body, out);
    scopes_.pop_back();
    return Value(std::move(out));
  }});
}

}  // namespace detail

struct Template::Parsed {
  Body body;
};

Template::Template(std::string_view source) {
  auto parsed = std::make_shared<Parsed>();
  parsed->body = parse(tokenize(source));
  parsed_ = std::move(parsed);
}

Template::~Template() = default;
Template::Template(const Template&) = default;
Template& Template::operator=(const Template&) = default;

std::string Template::render(const Dict& variables) const { return detail::Renderer(variables).run(parsed_->body); }

}  // namespace llmk::jinja
