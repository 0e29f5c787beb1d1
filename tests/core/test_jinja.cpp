// The Jinja subset, construct by construct: hand-written expectations of
// jinja2's behaviour, the whole table checked against PyPI's jinja2 at test
// time, and errors that name the construct and its position.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/jinja/limits.hpp"
#include "core/jinja/template.hpp"
#include "core/jinja/value.hpp"
#include "jinja_reference.hpp"
#include "support/skip.hpp"

using llmk::jinja::Template;
using llmk::jinja::Value;
using ojson = nlohmann::ordered_json;

namespace {

struct Case {
  const char* source;
  const char* variables;  // JSON object
  const char* expected;
};

// Each construct once; expectations as jinja2 3.1 renders them with
// trim_blocks and lstrip_blocks (checked against jinja2 itself below).
const Case kCases[] = {
    // text, comments, whitespace control, trim_blocks, lstrip_blocks
    {"plain text", "{}", "plain text"},
    {"a{# note #}b", "{}", "ab"},
    {"a  {{- 'b' -}}  c", "{}", "abc"},
    {"{% if true %}\nyes\n{% endif %}\nend", "{}", "yes\nend"},
    {"  {% if true %}x{% endif %}\n  {{ 'y' }}", "{}", "x  y"},
    {"line\n    {% if true %}\n  inside\n    {% endif %}\nafter", "{}", "line\n  inside\nafter"},
    {"  {%+ if true %}k{% endif +%}\nz", "{}", "  k\nz"},
    {"keep trailing\n", "{}", "keep trailing"},
    {"{# c #}\nnext", "{}", "next"},
    // literals and printing
    {"{{ 'a\\tb\\n' }}|{{ \"q'\" }}|{{ 42 }}|{{ -7 }}|{{ 2.5 }}|{{ 1e3 }}", "{}", "a\tb\n|q'|42|-7|2.5|1000.0"},
    {"{{ true }} {{ false }} {{ none }} {{ True }}", "{}", "True False None True"},
    {"{{ [1, 'a', none, 2.0] }} {{ {'k': 'v', 'n': 1} }}", "{}", "[1, 'a', None, 2.0] {'k': 'v', 'n': 1}"},
    {"{{ ['it\\'s'] }}", "{}", "[\"it's\"]"},
    {"{{ undefined_name }}|{{ x }}", "{\"x\": 0.1}", "|0.1"},
    // arithmetic, concat, comparisons, logic, ternary
    {"{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}", "{}",
     "7 3 -4 1 2 3.5 1024"},
    {"{{ 'a' + 'b' }} {{ 'x' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }}", "{}", "ab x1None ababab [1, 2]"},
    {"{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ 3 >= 3 }} {{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }}", "{}",
     "True True True True True False"},
    {"{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}", "{}", "True True True True"},
    {"{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 0 or [] }}", "{}", "x y True []"},
    {"{{ 'yes' if n > 1 else 'no' }} {{ 'only' if false }}|", "{\"n\": 2}", "yes |"},
    // access: attribute, subscript, negative index, slices
    {"{{ m.role }} {{ m['content'] }} {{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ s[1:3] }} {{ s[-1] }}",
     "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}, \"l\": [1, 2, 3], \"s\": \"héllo\"}",
     "user hi 3 [2, 3] [1, 2] [3, 2, 1] él o"},
    {"{{ m.missing is defined }} {{ m.content.content is defined }} {{ l.0 }}",
     "{\"m\": {\"content\": \"x\"}, \"l\": [5]}", "False False 5"},
    // for loops: loop variables, filters, else, unpacking, break/continue, scoping
    {"{% for x in l %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     "{\"l\": [\"a\", \"b\"]}", "01TrueFalse2;12FalseTrue2;"},
    {"{% for x in l if x != 2 %}{{ x }}{{ loop.last }} {% endfor %}", "{\"l\": [1, 2, 3]}", "1False 3True "},
    {"{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": 2}}", "z=1,a=2,za"},
    {"{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{\"l\": [1, 2, 3, 4, 5]}", "13"},
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "{}", "21"},
    {"{{ loop_prev }}{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}",
     "{}", "1112"},
    // if/elif/else, set, namespace, set block, macro
    {"{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}", "{\"n\": 2}", "two"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}block {{ a }}{% endset %}{{ c }}", "{}", "12block 1"},
    {"{% set ns = namespace(n=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}"
     "{{ ns.n }}{{ ns.found }}",
     "{}", "6False"},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', '?') }}"
     " {{ greet(name='Cy', punct='.') }}",
     "{}", "Hi Ann! Hi Bo? Hi Cy."},
    {"{% generation %}gen{% endgeneration %}", "{}", "gen"},
    // tests
    {"{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} {{ l is iterable }}"
     " {{ s is iterable }} {{ i is number }} {{ f is number }} {{ l is sequence }} {{ d is sequence }}"
     " {{ i is integer }} {{ f is float }} {{ b is boolean }}",
     "{\"x\": 1, \"n\": null, \"s\": \"t\", \"d\": {}, \"l\": [], \"i\": 3, \"f\": 1.5, \"b\": true}",
     "True True True True True True True True True True True True True True"},
    {"{{ 4 is divisibleby 2 }} {{ 3 is odd }} {{ 3 is even }} {{ 'a' is in 'abc' }} {{ x is not none }}"
     " {{ 1 is equalto 1 }} {{ 2 is sameas 2 }}",
     "{\"x\": 0}", "True True False True True True True"},
    // filters
    {"{{ '  pad  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ l | length }}|{{ 'héllo' | length }}|{{ 'Ab' | upper }}"
     "|{{ 'Ab' | lower }}|{{ 'hello world' | capitalize }}|{{ 'hello wORLD' | title }}",
     "{\"l\": [1, 2]}", "pad|a|2|5|AB|ab|Hello world|Hello World"},
    {"{{ u | default('dflt') }}|{{ '' | default('e', true) }}|{{ l | join(', ') }}|{{ l | first }}|{{ l | last }}"
     "|{{ 'a-b-c' | replace('-', '+') }}|{{ 12 | string }}|{{ '42' | int + 1 }}|{{ 'x' | int }}|{{ 3.9 | int }}"
     "|{{ 'ab' | list }}|{{ l | reverse | list }}|{{ [1, 1, 2] | unique | list }}|{{ -3 | abs }}|{{ [1, 2] | sum }}",
     "{\"l\": [1, 2, 3]}", "dflt|e|1, 2, 3|1|3|a+b+c|12|43|0|3|['a', 'b']|[3, 2, 1]|[1, 2]|3|3"},
    {"{{ d | items | list | length }}|{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join }}"
     "|{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}|{{ [0, 1, 2] | select | list }}"
     "|{{ ['a', 'b'] | reject('equalto', 'a') | list }}|{{ ['a', 'b'] | map('upper') | join }}"
     "|{% for k, v in {'b': 1, 'A': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}",
     "{\"d\": {\"k\": 1}, \"ms\": [{\"role\": \"user\", \"c\": \"u1\"}, {\"role\": \"bot\", \"c\": \"b\"},"
     " {\"role\": \"user\", \"c\": \"u2\"}]}",
     "1|u1u2|1|[1, 2]|['b']|AB|A2b1"},
    {"{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}|{{ [] | tojson(indent=4) }}|{{ 1.0 | tojson }}",
     "{\"d\": {\"z\": [1, true, null], \"a\": {\"x\": \"ü\"}}}",
     "{\"z\": [1, true, null], \"a\": {\"x\": \"ü\"}}|{\n  \"z\": [\n    1,\n    true,\n    null\n  ],\n  \"a\": {\n"
     "    \"x\": \"ü\"\n  }\n}|\"é\\\"\\n\"|[]|1.0"},
    // methods
    {"{{ ' x '.strip() }}|{{ 'xax'.lstrip('x') }}|{{ 'xax'.rstrip('x') }}|{{ 'a b  c'.split() }}|{{ 'a,b'.split(',') }}"
     "|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"
     "|{{ 'ab cd'.title() }}|{{ 'a-b'.replace('-', '') }}",
     "{}", "x|ax|xa|['a', 'b', 'c']|['a', 'b']|True|True|ABab|Ab Cd|ab"},
    {"{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('zz', 'no') }}|{{ d.get('zz') }}",
     "{\"d\": {\"a\": 1, \"b\": 2}}", "['a', 'b']|[1, 2]|1|no|None"},
    // globals
    {"{{ range(3) | list }}|{{ strftime_now('%%Y') }}", "{}", "[0, 1, 2]|%Y"},
};

std::string render(const char* source, const char* variables) {
  const Value vars = Value::from_json(ojson::parse(variables));
  return Template(source).render(vars.as_dict());
}

// The error message of rendering (or parsing) `source`, with its code.
std::pair<llmk::ErrorCode, std::string> error_of(const std::string& source, const char* variables = "{}") {
  try {
    const Value vars = Value::from_json(ojson::parse(variables));
    Template(source).render(vars.as_dict());
  } catch (const llmk::Error& e) {
    return {e.code(), e.what()};
  }
  FAIL("no llmk::Error for " << source);
  return {llmk::ErrorCode::internal, ""};
}

}  // namespace

TEST_CASE("Every construct of the Jinja subset renders as jinja2 renders it", "[jinja]") {
  for (const Case& c : kCases) {
    INFO("template: " << c.source);
    CHECK(render(c.source, c.variables) == c.expected);
  }
}

TEST_CASE("The construct table agrees with PyPI's jinja2 in transformers' environment", "[jinja]") {
  if (!llmk::test::have_venv()) LLMK_SKIP("no .venv with jinja2 (scripts/setup.sh makes it)");
  ojson cases = ojson::array();
  for (const Case& c : kCases) cases.push_back({{"source", c.source}, {"variables", ojson::parse(c.variables)}});
  const ojson reference = llmk::test::jinja_reference(cases);
  REQUIRE(reference.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("template: " << kCases[i].source << "\njinja2: " << reference[i].dump());
    REQUIRE(reference[i].contains("text"));
    CHECK(reference[i]["text"].get<std::string>() == kCases[i].expected);
  }
}

TEST_CASE("strftime_now formats the current local time", "[jinja]") {
  const std::string year = render("{{ strftime_now('%Y') }}", "{}");
  REQUIRE(year.size() == 4);
  CHECK(year >= "2024");
}

TEST_CASE("Constructs outside the subset are refused at parse time, naming the construct and position", "[jinja]") {
  const std::pair<const char*, const char*> cases[] = {
      {"ok\n  {% include 'x.jinja' %}", "'{% include %}' at line 2, column 6"},
      {"{% extends 'base' %}", "'{% extends %}' at line 1, column 4"},
      {"{% filter upper %}x{% endfilter %}", "'{% filter %}' at line 1, column 4"},
      {"{{ x | wordwrap(3) }}", "filter 'wordwrap' at line 1, column 8"},
      {"{% if x is escaped %}{% endif %}", "test 'escaped' at line 1, column 12"},
      {"{% for x in l recursive %}{% endfor %}", "'recursive' loops at line 1, column 15"},
      {"{{ f(*args) }}", "argument unpacking at line 1, column 6"},
  };
  for (const auto& [source, named] : cases) {
    const auto [code, message] = error_of(source);
    INFO(message);
    CHECK(code == llmk::ErrorCode::unsupported);
    CHECK_THAT(message, Catch::Contains(named) && Catch::Contains("unsupported construct"));
  }
}

TEST_CASE("Malformed templates are errors with their position", "[jinja]") {
  const std::pair<const char*, const char*> cases[] = {
      {"{% if x %}never closed", "missing {% endif %}"},
      {"{{ 'unclosed }}", "unclosed string literal at line 1, column 4"},
      {"text {{ x ", "unclosed '{{' at line 1, column 6"},
      {"{# comment", "unclosed comment at line 1, column 1"},
      {"{% endfor %}", "unexpected {% endfor %}"},
      {"{{ x $ y }}", "unexpected character '$' at line 1, column 6"},
      {"{{ (1 }}", "unclosed '{{' at line 1, column 1"},
      {"{{ (1 ] }}", "expected ')', found ']' at line 1, column 7"},
  };
  for (const auto& [source, named] : cases) {
    const auto [code, message] = error_of(source);
    INFO(message);
    CHECK(code == llmk::ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains(named));
  }
}

TEST_CASE("raise_exception and rendering failures are errors naming the message and position", "[jinja]") {
  auto [code, message] = error_of("{% if messages | length == 0 %}{{ raise_exception('No messages!') }}{% endif %}",
                                  R"({"messages": []})");
  CHECK(code == llmk::ErrorCode::invalid_argument);
  CHECK_THAT(message, Catch::Contains("chat template raised an exception: No messages!"));
  std::tie(code, message) = error_of("line\n{{ message.role }}");
  CHECK(code == llmk::ErrorCode::invalid_argument);
  CHECK_THAT(message, Catch::Contains("'message' is undefined") && Catch::Contains("line 2, column 11"));
  std::tie(code, message) = error_of("{{ 'a' + 1 }}");
  CHECK_THAT(message, Catch::Contains("unsupported operand types for +: string and integer"));
  std::tie(code, message) = error_of("{% for x in 5 %}{% endfor %}");
  CHECK_THAT(message, Catch::Contains("not iterable") && Catch::Contains("line 1, column 13"));
  std::tie(code, message) = error_of("{% set x = 1 %}{% set x.a = 2 %}");
  CHECK_THAT(message, Catch::Contains("not a namespace"));
  std::tie(code, message) = error_of("{{ 1 // 0 }}");
  CHECK_THAT(message, Catch::Contains("division by zero"));
  std::tie(code, message) = error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  CHECK_THAT(message, Catch::Contains("recursed too deep"));
}

TEST_CASE("Values print and serialise as Python does", "[jinja]") {
  using llmk::jinja::python_float_repr;
  CHECK(python_float_repr(1.0) == "1.0");
  CHECK(python_float_repr(0.1) == "0.1");
  CHECK(python_float_repr(1e16) == "1e+16");
  CHECK(python_float_repr(123456789012345.0) == "123456789012345.0");
  CHECK(python_float_repr(0.0001) == "0.0001");
  CHECK(python_float_repr(0.00001) == "1e-05");
  CHECK(python_float_repr(-2.5e-10) == "-2.5e-10");
  CHECK(llmk::jinja::to_json_text(Value::from_json(ojson::parse(R"({"a": "\u0001\t"})")), -1) ==
        "{\"a\": \"\\u0001\\t\"}");
}

// Resource limits (core/jinja/limits.hpp): each is a named error, and what
// is just within a limit still renders as jinja2 does.
TEST_CASE("Repetition, concatenation, range and output beyond their limits are named errors", "[jinja]") {
  using llmk::jinja::kMaxListItems;
  using llmk::jinja::kMaxStringBytes;
  const std::string half = std::to_string(kMaxStringBytes / 2);
  CHECK(render(("{{ ('ab' * " + half + ") | length }}").c_str(), "{}") == std::to_string(kMaxStringBytes));
  CHECK(render("{{ 'ab' * -3 }}|{{ [1] * -1 }}|{{ 0 * 'x' }}", "{}") == "|[]|");  // Python: empty
  // An empty sequence repeated any number of times is empty, at once (the
  // fuzzer found '' * 10**12 looping 10^12 times).
  CHECK(render("{{ '' * 10**12 }}|{{ [] * 10**12 }}|{{ 10**18 * '' }}", "{}") == "|[]|");
  CHECK(render(("{{ range(" + std::to_string(kMaxListItems) + ") | length }}").c_str(), "{}") ==
        std::to_string(kMaxListItems));
  CHECK(render("{{ range(9223372036854775807 - 2, 9223372036854775807) | list }}", "{}") ==
        "[9223372036854775805, 9223372036854775806]");
  CHECK(render("{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807) | list }}", "{}") ==
        "[-9223372036854775808, -1, 9223372036854775806]");
  const std::pair<std::string, const char*> cases[] = {
      {"{{ 'a' * 10**12 }}", "string repetition (*) would be 1000000000000 bytes, over the limit of 4194304"},
      {"{{ ('ab' * " + half + ") * 2 }}", "string repetition (*) would be 8388608 bytes"},
      {"{{ [1, 2] * 10**12 }}", "list repetition (*) would be 2000000000000 items, over the limit of 100000"},
      {"{{ range(10**12) | length }}", "range() would be 1000000000000 items, over the limit of 100000"},
      {"{{ range(0, 9223372036854775807, 2) | length }}", "range() would be 4611686018427387904 items"},
      {"{% set s = 'x' * 3000000 %}{{ s ~ s }}", "string concatenation (~) would be 6000000 bytes"},
      {"{% set s = 'x' * 3000000 %}{{ s + s }}", "string concatenation (+) would be 6000000 bytes"},
      {"{% set l = range(60000) | list %}{{ l + l }}", "list concatenation (+) would be 120000 items"},
      {"{% set s = 'x' * 3000000 %}{{ s }}{{ s }}", "rendered text would be over 4194304 bytes, the limit at line 1"},
      {"{% set s = 'x' * 3000000 %}{{ [s, s] }}", "printing a list would be"},
      {"{% set s = 'x' * 3000000 %}{{ [s, s] | join }}", "join would be 6000000 bytes"},
      {"{% set s = 'x' * 3000 %}{{ s | replace('x', s) }}", "replace would be"},
      {"{{ {'a': 1} | tojson(indent=100000) }}", "tojson indent would be 100000 spaces, over the limit of 64"},
  };
  for (const auto& [source, named] : cases) {
    const auto [code, message] = error_of(source);
    INFO(source << " -> " << message);
    CHECK(code == llmk::ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains(named));
  }
}

TEST_CASE("Nesting, loops, nested containers and total work beyond their limits are named errors", "[jinja]") {
  const int n = llmk::jinja::kMaxNesting;
  const auto nested = [](int depth, const std::string& open, const std::string& close) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += open;
    s += "1";
    for (int i = 0; i < depth; ++i) s += close;
    return s;
  };
  CHECK(render(("{{ " + nested(n - 10, "(", ")") + " }}").c_str(), "{}") == "1");
  std::string chain = "{{ 0";
  for (int i = 0; i < n - 10; ++i) chain += "+1";
  CHECK(render((chain + " }}").c_str(), "{}") == std::to_string(n - 10));
  std::string long_chain = "{{ 0";
  for (int i = 0; i < 10 * n; ++i) long_chain += "+1";
  std::string deep_ifs;
  for (int i = 0; i < 2 * n; ++i) deep_ifs += "{% if true %}";
  const std::pair<std::string, const char*> cases[] = {
      {"{{ " + nested(50 * n, "(", ")") + " }}", "template nested over 200 levels deep, the limit"},
      {"{{ " + nested(50 * n, "[", "]") + " }}", "template nested over 200 levels deep"},
      {"{{ " + nested(50 * n, "not ", "") + " }}", "template nested over 200 levels deep"},
      {long_chain + " }}", "expression nested over 200 levels deep, the limit"},
      {deep_ifs, "template nested over 200 levels deep"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "rendering would take over 268435456 bytes of work"},
      {"{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ 'abcdefghij' %}{% endfor %}",
       "rendering would take over 268435456 bytes of work"},
      {"{% set ns = namespace(x=[]) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}{% endfor %}",
       "over 2000 lists, dicts or namespaces nested in one another, the limit"},
      {"{% set ns = namespace(x=[]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
       "printing a value would be 201 levels deep, over the limit of 200"},
      {"{% set ns = namespace() %}{% set ns.x = [ns] %}{{ ns | tojson }}", "tojson of a value would be 201 levels deep"},
      {"{% macro f(k) %}{{ [[[[[[[[[[f(k)]]]]]]]]]] }}{% endmacro %}{{ f(1) }}", "nested over 1000 levels deep"},
      {"{{ range(10000) | unique | length }}", "unique would be 10001628 comparisons, over the limit of 10000000"},
      {"{% set ns = namespace(a=[0], b=[0]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}"
       "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
       "== would be 10000001 comparisons, over the limit of 10000000"},
      {"{% set ns = namespace(a=[0], b=[0]) %}{% for i in range(20) %}{% set ns.a = [ns.a, ns.a] %}"
       "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{% for i in range(1000) %}{{ ns.a == ns.b }}{% endfor %}",
       "rendering would take over 268435456 bytes of work"},
  };
  for (const auto& [source, named] : cases) {
    const auto [code, message] = error_of(source);
    INFO(source.substr(0, 120) << " -> " << message);
    CHECK(code == llmk::ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains(named));
  }
}

TEST_CASE("Integer arithmetic at the edges of 64 bits is exact or an error, as Python's would not fit", "[jinja]") {
  CHECK(render("{{ 2 ** 62 }}|{{ (-2) ** 63 }}|{{ 1 ** 10**18 }}|{{ (-1) ** (10**18 + 1) }}|{{ 0 ** 0 }}", "{}") ==
        "4611686018427387904|-9223372036854775808|1|-1|1");
  CHECK(render("{{ (-9223372036854775807 - 1) % -1 }}", "{}") == "0");
  CHECK(render("{{ range(4000) | unique | length }}|{{ [1, 1.0, true, 2] | unique | list }}", "{}") == "4000|[1, 2]");
  const std::pair<std::string, const char*> cases[] = {
      {"{{ 2 ** 63 }}", "integer ** overflows 64 bits"},
      {"{{ 9090 ** 5 }}", "integer ** overflows 64 bits"},
      {"{{ -(-9223372036854775807 - 1) }}", "integer - overflows 64 bits"},
      {"{{ (-9223372036854775807 - 1) // -1 }}", "integer // overflows 64 bits"},
      {"{{ [9223372036854775807, 1] | sum }}", "sum overflows 64 bits"},
      {"{{ (-9223372036854775807 - 1) | abs }}", "abs overflows 64 bits"},
  };
  for (const auto& [source, named] : cases) {
    const auto [code, message] = error_of(source);
    INFO(source << " -> " << message);
    CHECK(code == llmk::ErrorCode::invalid_argument);
    CHECK_THAT(message, Catch::Contains(named));
  }
}
